// Package apis_test holds the checks that span the API packages under
// apiserver/apis.
package apis_test

import (
	"embed"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

// wellKnown is every well_known.go file of the API packages, where each
// wire name is defined once (embedded, so go test can cache the result).
//
//go:embed */*/well_known.go
var wellKnown embed.FS

// deckhouseName matches a name under a deckhouse.io subdomain: a label,
// annotation or taint key (node.deckhouse.io/group), or in an API path the
// group and version (bashible.deckhouse.io/v1alpha1).
var deckhouseName = regexp.MustCompile(`[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\.deckhouse\.io/[A-Za-z0-9._-]*`)

// TestTemplatesSpeakOnlyWellKnownNames: every *.deckhouse.io/… name the
// shell templates write or read (a label, annotation or taint bashible
// sets on its Node, Instance or Events) is the value of a constant in a
// well_known.go file, so the Go side and the node side cannot drift apart
// and the wire-name lint knows every name. An API path's group and version
// must be a served group's.
func TestTemplatesSpeakOnlyWellKnownNames(t *testing.T) {
	defined := wellKnownValues(t)
	if len(defined) == 0 {
		t.Fatal("no constant found in apiserver/apis/*/*/well_known.go")
	}
	apiGroupVersions := []string{bashiblev1alpha1.SchemeGroupVersion.String()}

	tree := templates.Builtin()
	checked := 0
	err := fs.WalkDir(tree, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		text, err := fs.ReadFile(tree, path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, loc := range deckhouseName.FindAllStringIndex(line, -1) {
				name := line[loc[0]:loc[1]]
				checked++
				if strings.HasSuffix(line[:loc[0]], "/apis/") {
					if !slices.Contains(apiGroupVersions, name) {
						t.Errorf("templates/tree/%s:%d: the API path names %s, which is not a group and version bashible-apiserver serves (%v)", path, i+1, name, apiGroupVersions)
					}
					continue
				}
				if _, ok := defined[name]; !ok {
					t.Errorf("templates/tree/%s:%d: %s is a wire name defined in no apiserver/apis/*/*/well_known.go: define it there (apiserver/apis/deckhouse/v1/well_known.go for node-manager's own names), with who writes it and who reads it", path, i+1, name)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the template tree: %v", err)
	}
	if checked == 0 {
		t.Fatal("no *.deckhouse.io/ name found in the template tree: the pattern no longer matches what the templates write")
	}
}

// wellKnownValues is the set of string constants' values in the embedded
// well_known.go files (each value is written out in full there).
func wellKnownValues(t *testing.T) map[string]string {
	t.Helper()
	values := map[string]string{}
	files, err := fs.Glob(wellKnown, "*/*/well_known.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		src, err := wellKnown.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatalf("parsing %s: %v", name, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatalf("%s: %s: %v", name, lit.Value, err)
					}
					values[s] = name + ": " + vs.Names[i].Name
				}
			}
		}
	}
	return values
}
