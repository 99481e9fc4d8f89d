package templates

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"mvdan.cc/sh/v3/syntax"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
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
		"{{ index .nodeGroup.nodeTemplate.labels \"zz\" }}", "a\x00b", "if true; then",
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

// fuzzMarker is the command name a planted value tries to run.
const fuzzMarker = "pwnd_7c1e"

// FuzzRenderedScriptsKeepContextValuesInert plants a hostile string in one
// field of the render context at a time (the fuzzer picks the field and the
// string; the value is <s>pwnd_7c1e<s>, so "; " or "'; " or "$(" around
// the marker tries to make it a command), renders the built-in tree with a
// custom step, and parses every rendered script, and every script one
// writes from a here-document, with mvdan.cc/sh: either the render refuses
// the context, or no command in any script is named after the marker.
//
// The custom step is random bash (template actions are defused: what a
// NodeGroupConfiguration's author writes unquoted is the author's, and
// FuzzRenderCustomStep fuzzes templates) followed by a line that uses the
// planted field through squote, as AUTHORING.md tells authors to.
func FuzzRenderedScriptsKeepContextValuesInert(f *testing.F) {
	for i, seed := range []string{
		"; ", "'; ", "\"; ", "$(", "`", "\n", "\r", "\x00", "'\n", "\nPEM\n", "\nTOML\n", " && ", "|", ")", "}", "\\'; ",
		"'$(", "\"$(", "'\"$(", "$'\\n'", "\\\n", "a b", "-", "#", "\t", "'}; ", "\"}; ", "'\\''; ",
	} {
		f.Add(uint16(i), seed, "echo static")
		f.Add(uint16(i*7), seed, "echo static")
		f.Add(uint16(i*13+3), seed, "if true; then echo a; fi")
	}
	// An input that once failed: a quote the step's own content leaves open
	// is the author's, not a value escaping. A failing input the fuzzer
	// writes to testdata/fuzz belongs here, with the others: go test reads
	// that directory at run time, by modification time (see testdata in
	// golden_test.go).
	f.Add(uint16(116), "''", "'00000000000000")
	tree, err := LoadTree(Builtin())
	if err != nil {
		f.Fatal(err)
	}
	bases := fuzzBaseContexts(f)
	var fields []string
	for i := range bases {
		fields = append(fields, plantablePaths(&bases[i])...)
	}
	f.Fuzz(func(t *testing.T, field uint16, around, content string) {
		path := fields[int(field)%len(fields)]
		var ctx Context
		for _, base := range bases {
			if slices.Contains(plantablePaths(&base), path) {
				ctx = cloneContext(t, base)
				break
			}
		}
		// Template actions in the random content would let it build any
		// text, bombs included (FuzzRenderCustomStep covers those): here
		// the content is random bash.
		content = strings.ReplaceAll(content, "{{", "{ {")
		value := around + fuzzMarker + around
		plant(reflect.ValueOf(&ctx).Elem(), "", path, value)
		reference := templateReference(path)
		step := CustomStep{Name: "fuzz.sh", Weight: 500, Content: content + "\necho " + reference + "\n"}
		b, failures := tree.Render(&ctx, []CustomStep{step})
		if b == nil {
			if len(failures) == 0 {
				t.Fatal("no bundle and no failure")
			}
			return
		}
		scripts := map[string]string{"bashible.sh": b.Bashible, "bootstrap.sh": b.Bootstrap}
		for name, s := range b.Steps {
			// The step's own content is the author's: a marker it holds,
			// or a quote it leaves open around the value, is the author's
			// doing, not a value escaping its quoting.
			if name == "500_fuzz.sh" && (strings.Contains(content, fuzzMarker) || !parsesAsBash(content)) {
				continue
			}
			scripts[name] = s
		}
		for name, script := range scripts {
			all := append([]string{script}, embeddedScripts(script)...)
			for i, s := range all {
				if cmd := markerCommand(s); cmd != "" {
					t.Fatalf("%s = %q: %s (script %d) runs the planted command %q:\n%s", path, value, name, i, cmd, s)
				}
			}
		}
	})
}

// markerCommand returns the name of a command in script that carries the
// marker, or "" when there is none (or bash could not parse the script: the
// renderer refuses those, so they are not served).
// parsesAsBash reports whether script is complete bash on its own.
func parsesAsBash(script string) bool {
	_, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	return err == nil
}

func markerCommand(script string) string {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	if err != nil {
		return ""
	}
	found := ""
	syntax.Walk(file, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && len(c.Args) > 0 {
			if w := literal(c.Args[0]); strings.Contains(w, fuzzMarker) {
				found = w
			}
		}
		return found == ""
	})
	return found
}

// fuzzBaseContexts are contexts in which every field the tree renders is
// set: a managed containerd with a proxy, mirrors (with a CA and
// credentials), extra CAs, static reservation and swap; and a NotManaged
// runtime.
func fuzzBaseContexts(f *testing.F) []Context {
	settings, err := ParseClusterConfiguration([]byte(`
proxy: {httpProxy: "http://u:p@proxy:3128", httpsProxy: "https://proxy:3129", noProxy: [.corp]}
extraCACertificates: [` + jsonString(testCA) + `]
packageSource: {url: "https://mirror.corp/nm"}
registry:
  mirrors:
    - {host: docker.io, endpoints: ["https://m:5000"], username: u, password: p, ca: ` + jsonString(testCA) + `}
`))
	if err != nil {
		f.Fatal(err)
	}
	var out []Context
	for _, notManaged := range []bool{false, true} {
		ng := workerGroupForFuzz()
		ng.Spec.Kubelet = fuzzKubelet()
		if notManaged {
			notManagedGroup("/run/crio/crio.sock")(ng)
		}
		ctx, err := NewContext(ng, settings, []string{"10.0.0.1:6443", "10.0.0.2:6443"}, testCA)
		if err != nil {
			f.Fatal(err)
		}
		ctx.NodeGroup.NodeTemplate.Annotations["note"] = "x"
		ctx.NodeGroup.NodeTemplate.Taints = []Taint{{Key: "k", Value: "v", Effect: "NoSchedule"}}
		ctx.NodeGroup.Fencing = &Fencing{Enabled: true, WatchdogTimeout: "60s"}
		ctx.NodeGroup.CloudInstances = &CloudInstances{ClassReference: ClassReference{Kind: "K", Name: "n"}}
		out = append(out, ctx)
	}
	return out
}

// plantablePaths lists the string fields of ctx by path (as Check names
// them): struct fields, list elements and map values.
func plantablePaths(ctx *Context) []string {
	var out []string
	walkStrings(reflect.ValueOf(ctx).Elem(), "", nil, func(path string, _ tagOptions, _ string) {
		if !strings.Contains(path, " key ") {
			out = append(out, path)
		}
	})
	return out
}

// plant sets the string at path to value.
func plant(v reflect.Value, path, target, value string) bool {
	switch v.Kind() {
	case reflect.String:
		if path == target {
			v.SetString(value)
			return true
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			p := name
			if path != "" {
				p = path + "." + name
			}
			if strings.HasPrefix(target, p) && plant(v.Field(i), p, target, value) {
				return true
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			if plant(v.Index(i), fmt.Sprintf("%s[%d]", path, i), target, value) {
				return true
			}
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			p := fmt.Sprintf("%s[%q]", path, k.String())
			if p == target {
				if v.MapIndex(k).Kind() == reflect.String {
					v.SetMapIndex(k, reflect.ValueOf(value))
					return true
				}
			}
			if strings.HasPrefix(target, p) {
				elem := reflect.New(v.Type().Elem()).Elem()
				elem.Set(v.MapIndex(k))
				if plant(elem, p, target, value) {
					v.SetMapIndex(k, elem)
					return true
				}
			}
		}
	}
	return false
}

// templateReference is the template action that reads path, quoted for
// shell: nodeGroup.nodeTemplate.labels["a"] → {{ index .nodeGroup.nodeTemplate.labels "a" | squote }}.
func templateReference(path string) string {
	expr := "."
	rest := path
	for rest != "" {
		name := rest
		if i := strings.IndexAny(rest, ".["); i >= 0 {
			name, rest = rest[:i], rest[i:]
		} else {
			rest = ""
		}
		if name != "" {
			expr = fmt.Sprintf("(index %s %q)", expr, name)
		}
		switch {
		case strings.HasPrefix(rest, "."):
			rest = rest[1:]
		case strings.HasPrefix(rest, "["):
			end := strings.Index(rest, "]")
			key := rest[1:end]
			expr = fmt.Sprintf("(index %s %s)", expr, key)
			rest = strings.TrimPrefix(rest[end+1:], ".")
		}
	}
	return "{{ " + expr + " | squote }}"
}

func cloneContext(t *testing.T, c Context) Context {
	t.Helper()
	values, err := c.Values()
	if err != nil {
		t.Fatal(err)
	}
	var out Context
	data, err := toJSON(values)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(data), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// fuzzKubelet sets every kubelet field the tree renders.
func fuzzKubelet() *deckhousev1.KubeletSpec {
	return &deckhousev1.KubeletSpec{
		RootDir:             "/var/lib/k",
		ContainerLogMaxSize: "10Mi",
		ResourceReservation: &deckhousev1.ResourceReservationSpec{Mode: deckhousev1.ResourceReservationStatic,
			Static: &deckhousev1.StaticResourceReservation{CPU: ptrTo(resource.MustParse("500m")), Memory: ptrTo(resource.MustParse("1Gi")),
				EphemeralStorage: ptrTo(resource.MustParse("1Gi"))}},
		TopologyManager: &deckhousev1.TopologyManagerSpec{Enabled: true, Scope: "Pod", Policy: "SingleNumaNode"},
		MemorySwap:      &deckhousev1.MemorySwapSpec{SwapBehavior: "LimitedSwap", LimitedSwap: &deckhousev1.LimitedSwapSpec{Size: "4G"}},
	}
}
