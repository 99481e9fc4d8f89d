package templates

import (
	"encoding/json"
	"strings"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func notManagedGroup(socket string) func(*deckhousev1.NodeGroup) {
	return func(ng *deckhousev1.NodeGroup) {
		ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRINotManaged, NotManaged: &deckhousev1.NotManagedCRISpec{CRISocketPath: socket}}
	}
}

// A value that bypassed the API's validation (an old object, a CRD without
// the rule) must still never become a line of its own in a root script.
func TestRenderRefusesContextStringsWithLineBreaksNamingTheField(t *testing.T) {
	tree := builtinTree(t)
	cases := map[string]struct {
		mutate    func(*Context)
		wantField string
	}{
		"newline in the CRI socket": {func(c *Context) {
			c.NodeGroup.CRI.NotManaged.CRISocketPath = "/run/x.sock\ntouch /tmp/x"
		}, "nodeGroup.cri.notManaged.criSocketPath"},
		"carriage return in a label value": {func(c *Context) {
			c.NodeGroup.NodeTemplate.Labels["a"] = "1\rtouch /tmp/x"
		}, `nodeGroup.nodeTemplate.labels["a"]`},
		"NUL in an annotation key": {func(c *Context) {
			c.NodeGroup.NodeTemplate.Annotations["x\x00y"] = "v"
		}, "nodeGroup.nodeTemplate.annotations"},
		"newline in a registry endpoint": {func(c *Context) {
			c.Registry.Mirrors = []RegistryMirror{{Host: "docker.io", Endpoints: []string{"https://m\nreboot"}}}
		}, "registry.mirrors[0].endpoints[0]"},
	}
	for name, tc := range cases {
		ctx := workerContext(t, notManagedGroup("/run/x.sock"))
		tc.mutate(&ctx)
		b, failures := tree.Render(&ctx, nil)
		if b != nil {
			t.Errorf("%s: rendered a bundle", name)
			continue
		}
		if len(failures) != 1 || !strings.Contains(failures[0].Error(), tc.wantField) {
			t.Errorf("%s: failures %v, want one naming %s", name, failures, tc.wantField)
		}
	}
}

// The CRI socket reaches the kubelet's configuration as a quoted YAML
// string and no comment at all.
func TestCRISocketPathIsQuotedAndNeverInAComment(t *testing.T) {
	tree := builtinTree(t)
	b := mustRender(t, tree, workerContext(t, notManagedGroup("/run/my cri/$(x).sock")))
	if strings.Contains(b.Steps["040_containerd.sh"], "my cri") {
		t.Errorf("040_containerd.sh mentions the socket:\n%s", b.Steps["040_containerd.sh"])
	}
	if want := `containerRuntimeEndpoint: "unix:///run/my cri/$(x).sock"`; !strings.Contains(b.Steps["060_kubelet.sh"], want) {
		t.Errorf("060_kubelet.sh does not carry %s", want)
	}
}

func TestCertificatesAreReencodedFromTheirParsedBlocks(t *testing.T) {
	for name, input := range map[string]string{
		"CRLF line ends": strings.ReplaceAll(testCA, "\n", "\r\n"),
		"indented":       "  " + strings.ReplaceAll(testCA, "\n", "\n  "),
	} {
		s, err := ParseClusterConfiguration([]byte("extraCACertificates: [" + jsonString(input) + "]"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := s.Cluster.ExtraCACertificates[0]; got != testCA {
			t.Errorf("%s: kept %q, want the canonical encoding", name, got)
		}
	}
	for name, input := range map[string]string{
		"text before":   "touch /tmp/x\n" + testCA,
		"text after":    testCA + "PEM\ntouch /tmp/x\n",
		"text between":  testCA + "x\n" + testCA,
		"a private key": strings.ReplaceAll(testCA, "CERTIFICATE", "PRIVATE KEY"),
		"PEM headers":   strings.Replace(testCA, "-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n", 1),
	} {
		for _, cc := range []string{
			"extraCACertificates: [" + jsonString(input) + "]",
			"registry: {mirrors: [{host: docker.io, endpoints: [https://m], ca: " + jsonString(input) + "}]}",
		} {
			if _, err := ParseClusterConfiguration([]byte(cc)); err == nil {
				t.Errorf("%s: accepted in %s", name, cc[:20])
			}
		}
		ng := workerGroupForFuzz()
		settings, _ := ParseClusterConfiguration(nil)
		if _, err := NewContext(ng, settings, nil, input); err == nil || !strings.Contains(err.Error(), deckhousev1.RootCAConfigMap) {
			t.Errorf("%s: the cluster CA was accepted (err %v)", name, err)
		}
	}
	ng := workerGroupForFuzz()
	settings, _ := ParseClusterConfiguration(nil)
	ctx, err := NewContext(ng, settings, nil, strings.ReplaceAll(testCA, "\n", "\r\n"))
	if err != nil || ctx.Normal.KubernetesCA != testCA {
		t.Errorf("cluster CA with CRLF: %v, %q", err, ctx.Normal.KubernetesCA)
	}
}

func TestClusterDomainMustBeADNSName(t *testing.T) {
	for _, bad := range []string{"cluster.local\ntouch /tmp/x", "a b", "-x.local", "x..local", "UPPER.local", "x.local.", strings.Repeat("a", 64) + ".local"} {
		if _, err := ParseClusterConfiguration([]byte("clusterDomain: " + jsonString(bad))); err == nil {
			t.Errorf("clusterDomain %q was accepted", bad)
		}
	}
	for _, good := range []string{"cluster.local", "k8s", "my-cluster.corp.example"} {
		if _, err := ParseClusterConfiguration([]byte("clusterDomain: " + good)); err != nil {
			t.Errorf("clusterDomain %q: %v", good, err)
		}
	}
}

// jsonString writes s as a JSON string, which YAML reads back unchanged
// (carriage returns included).
func jsonString(s string) string {
	out, _ := json.Marshal(s)
	return string(out)
}
