package templates

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

// The built-in template tree:
//
//	bashible.sh.tpl        the node agent, served as bashibles/<group>
//	bootstrap.sh.tpl       first-boot script, served as bootstrap/<group>
//	steps/NNN_<name>.sh.tpl  bundle steps, served in nodegroupbundles/<group>
//	lib/_<name>.tpl        {{ define }} blocks available to every template
//
//go:embed all:tree
var embedded embed.FS

// Builtin is the template tree compiled into the binary.
func Builtin() fs.FS {
	sub, err := fs.Sub(embedded, "tree")
	if err != nil {
		panic(fmt.Sprintf("templates: embedded tree: %v", err))
	}
	return sub
}

// Overlay layers the files of dir over base: a file in dir replaces the
// file of the same path in base, and an empty file in dir removes it (so an
// operator or a test can drop a built-in step).
func Overlay(base fs.FS, dir string) fs.FS {
	return overlayFS{top: os.DirFS(dir), base: base}
}

type overlayFS struct{ top, base fs.FS }

func (o overlayFS) Open(name string) (fs.File, error) {
	if f, err := o.top.Open(name); err == nil {
		return f, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return o.base.Open(name)
}

func (o overlayFS) ReadDir(name string) ([]fs.DirEntry, error) {
	top, topErr := fs.ReadDir(o.top, name)
	base, baseErr := fs.ReadDir(o.base, name)
	if topErr != nil && baseErr != nil {
		return nil, baseErr
	}
	byName := map[string]fs.DirEntry{}
	for _, e := range base {
		byName[e.Name()] = e
	}
	for _, e := range top {
		byName[e.Name()] = e
	}
	out := make([]fs.DirEntry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// stepFileRE is a built-in step's template file name.
var stepFileRE = regexp.MustCompile(`^([0-9]{3})_([a-z0-9][-a-z0-9_.]*)\.sh\.tpl$`)

// Tree is a parsed template tree.
type Tree struct {
	engine    *Engine
	bashible  string
	bootstrap string
	steps     []namedText // sorted by file name
	digest    string
}

type namedText struct{ name, text string }

// LoadTree reads and checks a template tree. Errors name the file.
func LoadTree(fsys fs.FS) (*Tree, error) {
	h := sha256.New()
	read := func(name string) (string, error) {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return "", fmt.Errorf("template tree: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
		return string(data), nil
	}
	t := &Tree{}
	var err error
	if t.bashible, err = read("bashible.sh.tpl"); err != nil {
		return nil, err
	}
	if t.bootstrap, err = read("bootstrap.sh.tpl"); err != nil {
		return nil, err
	}
	library := map[string]string{}
	libs, err := fs.ReadDir(fsys, "lib")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("template tree: %w", err)
	}
	for _, e := range libs {
		if e.IsDir() || !strings.HasPrefix(e.Name(), "_") || !strings.HasSuffix(e.Name(), ".tpl") {
			return nil, fmt.Errorf("template tree: lib/%s: library files are named _<name>.tpl", e.Name())
		}
		text, err := read(path.Join("lib", e.Name()))
		if err != nil {
			return nil, err
		}
		library[path.Join("lib", e.Name())] = text
	}
	steps, err := fs.ReadDir(fsys, "steps")
	if err != nil {
		return nil, fmt.Errorf("template tree: %w", err)
	}
	for _, e := range steps {
		if e.IsDir() || !stepFileRE.MatchString(e.Name()) {
			return nil, fmt.Errorf("template tree: steps/%s: step files are named NNN_<name>.sh.tpl (three digits, lowercase name)", e.Name())
		}
		text, err := read(path.Join("steps", e.Name()))
		if err != nil {
			return nil, err
		}
		if text == "" { // removed by an overlay
			continue
		}
		t.steps = append(t.steps, namedText{name: strings.TrimSuffix(e.Name(), ".tpl"), text: text})
	}
	if t.engine, err = NewEngine(library); err != nil {
		return nil, err
	}
	t.digest = hex.EncodeToString(h.Sum(nil))
	return t, nil
}

// Digest identifies the tree's content: two trees with the same digest
// render the same bundles from the same context.
func (t *Tree) Digest() string { return t.digest }

// StepNames are the built-in steps' file names in order.
func (t *Tree) StepNames() []string {
	names := make([]string, len(t.steps))
	for i, s := range t.steps {
		names[i] = s.name
	}
	return names
}
