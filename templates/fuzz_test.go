package templates

import (
	"testing"
	"time"
)

// FuzzRenderCustomStep renders arbitrary NodeGroupConfiguration content with
// a real context and the built-in tree: it must never panic, and must fail
// or finish quickly whatever the content asks for.
func FuzzRenderCustomStep(f *testing.F) {
	for _, seed := range []string{
		"echo {{ .nodeGroup.name }}",
		"{{ range $k, $v := .nodeGroup.nodeTemplate.labels }}{{ $k }}{{ end }}",
		"{{ .missing }}", "{{ if }}", "{{ fail \"x\" }}", "{{ tpl \"{{ .cri }}\" . }}",
		"{{ include \"step-header\" . }}", "{{ range until 100000000 }}x{{ end }}",
		"{{ toYaml . | fromYaml | toJson }}", "{{ template \"machine-step-header\" . }}", "{{", "}}{{-",
	} {
		f.Add(seed)
	}
	tree, err := LoadTree(Builtin())
	if err != nil {
		f.Fatal(err)
	}
	settings, err := ParseClusterConfiguration(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content string) {
		ctx := fuzzContext(settings)
		start := time.Now()
		b, failures := tree.Render(&ctx, []CustomStep{{Name: "fuzz.sh", Weight: 500, Content: content}})
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("rendering %q took %s", content, d)
		}
		if (b == nil) == (failures == nil) {
			t.Fatalf("want a bundle or failures, got %v and %v", b != nil, failures)
		}
		for _, f := range failures {
			if f.Custom != "fuzz.sh" {
				t.Fatalf("a custom step's failure is attributed to %q: %v", f.Custom, f)
			}
		}
	})
}

func fuzzContext(settings ClusterSettings) Context {
	ng := workerGroupForFuzz()
	ctx, err := NewContext(ng, settings, []string{"10.0.0.1:6443"}, testCA)
	if err != nil {
		panic(err) // the built-in version map covers the default Kubernetes version
	}
	return ctx
}
