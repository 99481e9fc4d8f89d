package templates

import (
	_ "embed"
	"io/fs"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The package's documents, embedded as testdata is (golden_test.go), so
// that go test's cached result stands in a fresh clone.
var (
	//go:embed README.md
	readmeDoc string
	//go:embed AUTHORING.md
	authoringDoc string
)

// contextPaths lists the template paths of every leaf field of a type:
// ".nodeGroup.kubelet.maxPods", ".registry.mirrors[].host", ... A field
// that may be null (a pointer to a struct) is listed itself, because its
// presence is documented, and so are its fields.
func contextPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		path := prefix + "." + strings.Split(f.Tag.Get("json"), ",")[0]
		switch {
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
			out = append(out, path)
			out = append(out, contextPaths(f.Type.Elem(), path)...)
		case f.Type.Kind() == reflect.Struct:
			out = append(out, contextPaths(f.Type, path)...)
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
			// An optional map: documented itself and field by field.
			out = append(out, path)
			out = append(out, contextPaths(f.Type.Elem(), path)...)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			out = append(out, contextPaths(f.Type.Elem(), path+"[]")...)
		default:
			out = append(out, path)
		}
	}
	return out
}

// TestContextFieldsAreDocumented: README.md's table names every field a
// template can read.
func TestContextFieldsAreDocumented(t *testing.T) {
	paths := contextPaths(reflect.TypeOf(Context{}), "")
	if len(paths) < 50 {
		t.Fatalf("only %d context fields found: %v", len(paths), paths)
	}
	for _, p := range paths {
		if !strings.Contains(readmeDoc, "| `"+p+"` |") {
			t.Errorf("README.md does not document the context field %s", p)
		}
	}
}

// TestLibraryHelpersAreDocumented: AUTHORING.md describes every function
// of the library steps run with.
func TestLibraryHelpersAreDocumented(t *testing.T) {
	var lib []byte
	for _, file := range []string{"lib/_node_lib.tpl", "lib/_bashbooster.tpl"} {
		text, err := fs.ReadFile(Builtin(), file)
		if err != nil {
			t.Fatal(err)
		}
		lib = append(lib, text...)
	}
	helpers := regexp.MustCompile(`(?m)^([_A-Za-z][-_A-Za-z0-9?.]*)\(\)`).FindAllStringSubmatch(string(lib), -1)
	if len(helpers) < 200 {
		t.Fatalf("only %d helpers found", len(helpers))
	}
	for _, h := range helpers {
		if !strings.Contains(authoringDoc, "`"+h[1]) {
			t.Errorf("AUTHORING.md does not describe the library helper %s", h[1])
		}
	}
	tree, err := LoadTree(Builtin())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range tree.StepNames() {
		if !strings.Contains(authoringDoc, "| `"+strings.TrimSuffix(step, ".sh")+"` |") {
			t.Errorf("AUTHORING.md does not list the built-in step %s", step)
		}
	}
}
