package templates

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// TestKubeletProviderID runs the kubelet configuration's providerID part:
// the providerID Cluster API Provider Static wrote to the host becomes the
// kubelet's providerID, as one JSON string whatever it holds; without the
// file the configuration has none.
func TestKubeletProviderID(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed")
	}
	step := mustRender(t, builtinTree(t), staticContext(t, deckhousev1.NodeTypeStatic, "")).Steps["060_kubelet.sh"]
	part := excerpt(t, step, "  # A host joined by Cluster API Provider Static", "} | bb-write-if-changed /etc/kubernetes/kubelet/config.yaml")
	for _, c := range []struct {
		name, file string // file "": no file
		want       string
	}{
		{"written by CAPS", infrav1alpha1.ProviderIDPrefix + "7c0e6a3e-1c1a-4a53-9a4b-0d1e2f3a4b5c\n", `providerID: "` + infrav1alpha1.ProviderIDPrefix + `7c0e6a3e-1c1a-4a53-9a4b-0d1e2f3a4b5c"` + "\n"},
		{"quoted whatever it holds", "a\"b: 'c' $(x)\nsecond line\n", `providerID: "a\"b: 'c' $(x)"` + "\n"},
		{"no file", "", ""},
		{"an empty file", "\n\n", `providerID: ""` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "node-spec-provider-id")
			if c.file != "" {
				writeFile(t, file, c.file)
			}
			script := "set -Eeuo pipefail\n" + strings.ReplaceAll(part, "/var/lib/bashible/node-spec-provider-id", file)
			out, err := exec.Command("bash", "-c", script).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if string(out) != c.want {
				t.Errorf("got %q, want %q", out, c.want)
			}
		})
	}
}
