package apiserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestAPIRefusesValuesThatWouldBreakOutOfAScript: the values issue 10 found
// running as root on every node of a group are refused when written.
func TestAPIRefusesValuesThatWouldBreakOutOfAScript(t *testing.T) {
	ctx := framework.Context(t)
	groups := map[string]func(*deckhousev1.NodeGroup){
		"a newline in criSocketPath": func(ng *deckhousev1.NodeGroup) {
			ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRINotManaged,
				NotManaged: &deckhousev1.NotManagedCRISpec{CRISocketPath: "/run/x.sock\ntouch /tmp/x"}}
		},
		"a space in criSocketPath": func(ng *deckhousev1.NodeGroup) {
			ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRINotManaged,
				NotManaged: &deckhousev1.NotManagedCRISpec{CRISocketPath: "/run/x.sock; touch /tmp/x"}}
		},
		"a quote in a taint value": func(ng *deckhousev1.NodeGroup) {
			ng.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Taints: []deckhousev1.Taint{{Key: "a", Value: "x'$(touch /tmp/x)", Effect: "NoSchedule"}}}
		},
		"a command in the instance class name": func(ng *deckhousev1.NodeGroup) {
			ng.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
			ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{MaxPerZone: 1,
				ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "a;touch /tmp/x"}}
		},
	}
	for what, mutate := range groups {
		_, err := f.CreateGroup(ctx, framework.NewGroup("hostile", mutate))
		if err == nil {
			_ = f.NM.DeckhouseV1().NodeGroups().Delete(ctx, "hostile", metav1.DeleteOptions{})
			t.Errorf("%s: the NodeGroup was accepted", what)
			continue
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want Invalid", what, err)
		}
	}
	configs := map[string]deckhousev1alpha1.NodeGroupConfiguration{
		"a NUL in content": {ObjectMeta: metav1.ObjectMeta{Name: "nul.sh"},
			Spec: deckhousev1alpha1.NodeGroupConfigurationSpec{Content: "echo a\x00001_wait_for_approval.sh", NodeGroups: []string{"*"}, Bundles: []string{"*"}}},
		"a carriage return in content": {ObjectMeta: metav1.ObjectMeta{Name: "crlf.sh"},
			Spec: deckhousev1alpha1.NodeGroupConfigurationSpec{Content: "echo a\r\n", NodeGroups: []string{"*"}, Bundles: []string{"*"}}},
		"a name too long for a step file": {ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 201)},
			Spec: deckhousev1alpha1.NodeGroupConfigurationSpec{Content: "true", NodeGroups: []string{"*"}, Bundles: []string{"*"}}},
	}
	for what, ngc := range configs {
		_, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Create(ctx, &ngc, metav1.CreateOptions{})
		if err == nil {
			_ = f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(ctx, ngc.Name, metav1.DeleteOptions{})
			t.Errorf("%s: the NodeGroupConfiguration was accepted", what)
			continue
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want Invalid", what, err)
		}
	}
}

// hostileURL is a package source and registry endpoint the API accepts
// (http(s), no whitespace, quotes, backslash, $ or backquote) full of what
// a shell would run unquoted: it would create ./pwned.
const hostileURL = "https://mirror.corp/nm;touch>pwned;(touch>pwned)&touch<pwned||touch>pwned"

// TestServedStepsKeepHostileButValidValuesInert takes 040_containerd and
// 060_kubelet from the served bundles of groups whose strings are at their
// hostile-but-valid extreme, checks them with bash -n, and runs them as an
// unprivileged user in a throwaway directory with the node's commands
// stubbed: the file the values try to create never appears. A control run
// shows that the same value, unquoted, does create it.
func TestServedStepsKeepHostileButValidValuesInert(t *testing.T) {
	ctx := framework.Context(t)
	setClusterConfiguration(t, `
apiVersion: deckhouse.io/v1
kind: ClusterConfiguration
clusterDomain: a--b.c-d.x
packageSource:
  url: "`+hostileURL+`"
registry:
  mirrors:
    - host: docker.io
      endpoints: ["`+hostileURL+`"]
`)
	socket := "/-rf/../" + strings.Repeat("x", 40) + "/.sock"
	groups := map[string]func(*deckhousev1.NodeGroup){
		"hostile-managed": func(ng *deckhousev1.NodeGroup) {
			ng.Spec.Kubelet = &deckhousev1.KubeletSpec{RootDir: "/_rf/_..", ContainerLogMaxSize: "999999999Gi",
				MemorySwap: &deckhousev1.MemorySwapSpec{SwapBehavior: "LimitedSwap", LimitedSwap: &deckhousev1.LimitedSwapSpec{Size: "99999G"}}}
			ng.Spec.NodeTemplate = &deckhousev1.NodeTemplate{
				Annotations: map[string]string{"note": "'; touch pwned; '$(touch pwned)`touch pwned`"},
				Taints:      []deckhousev1.Taint{{Key: "example.com/x-_.y", Value: "x-_.y", Effect: "NoSchedule"}},
			}
		},
		"hostile-notmanaged": func(ng *deckhousev1.NodeGroup) {
			ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRINotManaged, NotManaged: &deckhousev1.NotManagedCRISpec{CRISocketPath: socket}}
		},
	}
	for name, mutate := range groups {
		if _, err := f.CreateGroup(ctx, framework.NewGroup(name, mutate)); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { _ = f.NM.DeckhouseV1().NodeGroups().Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	for name := range groups {
		var steps map[string]string
		framework.Poll(t, "the bundle of "+name+" with the hostile package source", func(ctx2 context.Context) (bool, error) {
			b, err := f.NM.BashibleV1alpha1().NodeGroupBundles().Get(ctx2, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			steps = b.Data
			return strings.Contains(b.Data["050_kubernetes_binaries.sh"], "mirror.corp"), nil
		})
		for _, step := range []string{"040_containerd.sh", "060_kubelet.sh"} {
			script := steps[step]
			if name == "hostile-notmanaged" && step == "060_kubelet.sh" && !strings.Contains(script, `"unix://`+socket+`"`) {
				t.Errorf("%s/%s does not carry the socket as a quoted string", name, step)
			}
			if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
				t.Errorf("%s/%s: bash -n: %v\n%s", name, step, err, out)
			}
			// The node's kubeconfig is looked for in the throwaway
			// directory, so 060 goes on past the credentials to the
			// kubelet's directories and units, where rootDir is written.
			script = strings.ReplaceAll(script, "/etc/kubernetes/kubelet.conf ]]", "./kubelet.conf ]]")
			dir := runUnprivileged(t, script)
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Errorf("%s/%s: running it created the marker file", name, step)
			}
			// The run went through the whole step: its last call is there.
			last := map[string]string{"040_containerd.sh": "bb-unit-converge containerd.service", "060_kubelet.sh": "bb-unit-converge kubelet.service"}[step]
			if name == "hostile-notmanaged" && step == "040_containerd.sh" {
				last = "bb-changed-clear containerd"
			}
			if calls, _ := os.ReadFile(filepath.Join(dir, "calls")); !strings.Contains(string(calls), last) {
				t.Errorf("%s/%s stopped before its end (no %q):\n%s", name, step, last, calls)
			}
		}
	}

	// Control: the same value unquoted in a script does create the file.
	dir := runUnprivileged(t, "x="+hostileURL+"\n")
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err != nil {
		t.Errorf("control: the hostile URL unquoted did not create the marker (%v): the test proves nothing", err)
	}
}

// stubs stand in for what a step calls on a node: bashible's library
// functions and the commands that need root or the network. Each records
// its arguments; a stub that reads a file reads it from stdin.
const stubs = `
for f in bb-write-if-changed bb-remove bb-log bb-disruption-gate bb-unit-converge bb-changed-clear bb-changed bb-mark-changed \
    bb-download bb-with-proxy systemctl modprobe chmod mv swapon fallocate mkswap jq; do
  eval "$f() { printf '%s\n' \"$f \$*\" >> calls; if [[ ! -t 0 ]]; then cat > /dev/null; fi; return 0; }"
done
bb-arch() { echo amd64; }
# mkdir makes only what is under /tmp (the step's own temporary directory);
# tar "unpacks" an archive with one binary into the directory after -C.
mkdir() { local a; for a; do if [[ $a == /tmp/* ]]; then command mkdir -p "$a"; fi; done; }
tar() { command mkdir -p "${*: -1}/bin" && : > "${*: -1}/bin/containerd"; }
bb-bundle() { echo debian; }
`

// runUnprivileged runs script as nobody (uid and gid 65534, no groups) in
// a new throwaway directory, with the stubs defined, and returns the
// directory. The script's own failure is logged, not fatal: what matters is
// what it left behind.
func runUnprivileged(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"stubs.sh": stubs, "step.sh": script, "kubelet.conf": "present"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"bash", "--noprofile", "--norc", "-c", `. ./stubs.sh; . ./step.sh`)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	out, err := cmd.CombinedOutput()
	t.Logf("ran as nobody in %s: %v\n%s", dir, err, out)
	return dir
}
