package templates

import (
	"embed"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/shelltest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current templates")

// testdata is embedded, not read at run time. go test keeps a package's
// passing result while nothing it depends on changes, and for a file the
// tests open in the module that means its path, size and modification time;
// every fresh clone (CI's) has new modification times, so this package's
// 90 s under -race ran again each time. Embedded files are part of the
// test binary, compared by content. The package reads nothing else of the
// module at run time (the tree and versions.yaml are embedded too; its
// fuzz seeds are in the code).
//
//go:embed all:testdata
var embeddedTestdata embed.FS

// testdataFS is testdata as the tests read it: as embedded, or as on disk
// under -update, which rewrites it.
func testdataFS() fs.FS {
	if *update {
		return os.DirFS(".")
	}
	return embeddedTestdata
}

// fixture is one golden-test input: a NodeGroup and the cluster around it.
type fixture struct {
	NodeGroup            deckhousev1.NodeGroup `json:"nodeGroup"`
	ClusterConfiguration string                `json:"clusterConfiguration"`
	// StaticClusterConfiguration is Deckhouse's, empty for none.
	StaticClusterConfiguration string   `json:"staticClusterConfiguration"`
	Endpoints                  []string `json:"endpoints"`
	CustomSteps                []struct {
		Name    string   `json:"name"`
		Weight  int32    `json:"weight"`
		Bundles []string `json:"bundles"`
		Content string   `json:"content"`
	} `json:"customSteps"`
	// NodeUsers are NodeUser objects; the group's context carries those
	// that select it.
	NodeUsers []*deckhousev1.NodeUser `json:"nodeUsers"`
}

// testCA is a real certificate (the fixtures' registry mirror CA, also
// the rootfs e2e suite's cluster CA): the cluster CA is parsed and encoded
// again.
var testCA = func() string {
	pem, err := embeddedTestdata.ReadFile("testdata/ca.crt")
	if err != nil {
		panic(err)
	}
	return string(pem)
}()

func loadFixture(t *testing.T, path string) (Context, []CustomStep) {
	t.Helper()
	data, err := fs.ReadFile(testdataFS(), path)
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	settings, err := ParseClusterConfiguration([]byte(f.ClusterConfiguration))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if settings.Static, err = ParseStaticClusterConfiguration([]byte(f.StaticClusterConfiguration)); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var custom []CustomStep
	for _, s := range f.CustomSteps {
		custom = append(custom, CustomStep{Name: s.Name, Weight: s.Weight, Bundles: s.Bundles, Content: s.Content})
	}
	ctx, err := NewContext(&f.NodeGroup, settings, f.Endpoints, testCA)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if ctx.NodeUsers, err = NodeUsersFor(f.NodeGroup.Name, f.NodeUsers); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return ctx, custom
}

// renderedFiles lays a bundle out as files: bashible.sh, bootstrap.sh,
// steps/<name> and checksum.
func renderedFiles(b *Bundle) map[string]string {
	files := map[string]string{
		"bashible.sh":  b.Bashible,
		"bootstrap.sh": b.Bootstrap,
		"checksum":     b.Checksum + "\n",
	}
	for name, content := range b.Steps {
		files[filepath.Join("steps", name)] = content
	}
	return files
}

// TestGolden renders every fixture with the built-in tree and compares the
// result with testdata/golden/<fixture>/; every script, and every script a
// script writes from a here-document, must pass bash -n and shellcheck.
// Run with -update to rewrite the golden files.
//
// The fixtures render side by side (each owns its golden directory, which
// -update rewrites, and the tree is read-only), and their scripts are
// checked together once all are rendered: shellcheck costs less over many
// scripts at once than one process per script. TestGolden itself is not
// parallel: it runs before the parallel tests, so its fixtures do not
// wait for their slots behind the package's slow script runs.
func TestGolden(t *testing.T) {
	tree := builtinTree(t)
	fixtures, err := fs.Glob(testdataFS(), "testdata/fixtures/*.yaml")
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var mu sync.Mutex
	scripts := map[string]string{} // by <fixture>/<file>
	t.Run("fixtures", func(t *testing.T) {
		for _, path := range fixtures {
			name := strings.TrimSuffix(filepath.Base(path), ".yaml")
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				files := renderGolden(t, tree, path, "testdata/golden/"+name)
				mu.Lock()
				defer mu.Unlock()
				for file, content := range files {
					if strings.HasSuffix(file, ".sh") {
						scripts[name+"/"+file] = content
						for i, script := range embeddedScripts(content) {
							scripts[fmt.Sprintf("%s/%s (embedded script %d)", name, file, i+1)] = script
						}
					}
				}
			})
		}
	})
	shelltest.CheckAll(t, scripts)
}

// renderGolden renders the fixture at path, rewrites its golden directory
// dir under -update, compares the rendered files with it and returns them.
func renderGolden(t *testing.T, tree *Tree, path, dir string) map[string]string {
	t.Helper()
	ctx, custom := loadFixture(t, path)
	bundle, failures := tree.Render(&ctx, custom)
	if failures != nil {
		t.Fatalf("render failed: %v", failures)
	}
	files := renderedFiles(bundle)
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		for file, content := range files {
			p := filepath.Join(dir, file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	compareGolden(t, dir, files)
	return files
}

func compareGolden(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	var onDisk []string
	golden := testdataFS()
	err := fs.WalkDir(golden, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, dir+"/")
		onDisk = append(onDisk, rel)
		return nil
	})
	if err != nil {
		t.Fatalf("read golden files (run go test ./templates -update to create them): %v", err)
	}
	var rendered []string
	for f := range files {
		rendered = append(rendered, f)
	}
	slices.Sort(onDisk)
	slices.Sort(rendered)
	if !slices.Equal(onDisk, rendered) {
		t.Fatalf("golden files %v, rendered %v (run go test ./templates -update)", onDisk, rendered)
	}
	for file, content := range files {
		want, err := fs.ReadFile(golden, dir+"/"+file)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != content {
			t.Errorf("%s differs from its golden file (run go test ./templates -update and review the diff):\n%s", file, firstDifference(string(want), content))
		}
	}
}

func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  golden:   %s\n  rendered: %s", i+1, wl, gl)
		}
	}
	return "(only trailing differences)"
}

// heredocRE finds the start of a quoted here-document: <<'WORD' and the
// rest of its line.
var heredocRE = regexp.MustCompile(`<<'([A-Z_]+)'[^\n]*\n`)

// embeddedScripts returns the bash scripts a script writes from quoted
// here-documents (the library in bashible.sh, cleanup_static_node.sh):
// those whose first line is a bash shebang or a shellcheck shell directive.
func embeddedScripts(script string) []string {
	var out []string
	for _, m := range heredocRE.FindAllStringSubmatchIndex(script, -1) {
		word, body := script[m[2]:m[3]], script[m[1]:]
		end := strings.Index(body, "\n"+word+"\n")
		if end < 0 {
			continue
		}
		body = body[:end+1]
		first, _, _ := strings.Cut(body, "\n")
		if first == "#!/usr/bin/env bash" || strings.Contains(body[:min(len(body), 300)], "# shellcheck shell=bash") {
			out = append(out, body)
		}
	}
	return out
}
