// Command wirenames is what hack/verify-wire-names.sh (and so `make lint`)
// runs: it fails when a wire name defined in a well_known.go file is
// written as a string literal in any other Go file of the repository.
//
// Wire names (labels, annotations, taints, field managers, namespaces,
// well-known object names) are what nodes, users and other components
// speak; each is defined once, beside the API types, in
// apiserver/apis/*/*/well_known.go, and used everywhere else by its
// constant, so a name cannot drift between two copies.
//
// The rules:
//   - every string constant of a well_known.go file must be written as a
//     plain literal (so a reader and this check see the exact value);
//   - a Go string literal elsewhere whose whole value equals one of those
//     values is reported, with the constant to use instead;
//   - a literal that starts with the value of a constant named ...Prefix or
//     ...Domain (manual-bootstrap-for-, node.deckhouse.io/, ...) is
//     reported too, as Prefix + "rest": a new name in node-manager's
//     domains belongs in a well_known.go file;
//   - two constants may not share a value;
//   - some values are defined there but not chased here, because as
//     literals they mean too many other things: a single lowercase word
//     ("app", "master", "bashible": a test pod's label, a test group's
//     name) and the data keys, constants named ...Key ("bashible.sh",
//     "bootstrap.sh": also the names of files the tests write);
//   - only whole literals count: a name inside a longer string (a rendered
//     kubelet flag line a test expects, a JSON patch in a raw string) or in
//     a comment is content, not a use of the name;
//   - generated/ (code-generator output), testdata and hidden directories
//     are not read.
//
// Usage: go run ./hack/cmd/wirenames [repository root, default .]
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	//__DELETE__
)

// wellKnownFile is the name of the files that define wire names.
const wellKnownFile = "well_known.go"

// wireName is one constant of a well_known.go file.
type wireName struct {
	value string
	// ref is how another package names the constant, e.g.
	// deckhousev1.NodeGroupLabel (the package's usual import alias).
	ref string
	// where is the definition, file:line.
	where  string
	prefix bool
	// unchased values are defined but not looked for (see the package comment).
	unchased bool
}

// singleWord values are defined but not chased (see the package comment).
var singleWord = regexp.MustCompile(`\A[a-z]+\z`)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	findings, err := run(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify-wire-names:", err)
		os.Exit(2)
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		fmt.Printf("verify-wire-names: %d wire-name literal(s) outside the well_known.go files: "+
			"use the constants named above (import alias as shown), or define a new name in a well_known.go file\n", len(findings))
		os.Exit(1)
	}
}

// run returns one line per offending literal, sorted by file and line.
func run(root string) ([]string, error) {
	var defs, sources []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || rel == "generated") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		if d.Name() == wellKnownFile {
			defs = append(defs, rel)
		} else {
			sources = append(sources, rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(defs) == 0 {
		return nil, fmt.Errorf("no %s file under %s: run from the repository root", wellKnownFile, root)
	}

	defined := map[string]wireName{} // every value, to refuse two constants with one
	names := map[string]wireName{}   // the values looked for
	var prefixes []wireName
	for _, def := range defs {
		found, err := definitions(root, def)
		if err != nil {
			return nil, err
		}
		for _, n := range found {
			if other, ok := defined[n.value]; ok {
				return nil, fmt.Errorf("%s: %s has the value %q of %s (%s): keep one", n.where, n.ref, n.value, other.ref, other.where)
			}
			defined[n.value] = n
			if n.unchased {
				continue
			}
			names[n.value] = n
			if n.prefix {
				prefixes = append(prefixes, n)
			}
		}
	}
	// The longest prefix is the most precise advice.
	slices.SortFunc(prefixes, func(a, b wireName) int { return len(b.value) - len(a.value) })

	var findings []string
	for _, src := range sources {
		lits, err := literals(root, src)
		if err != nil {
			return nil, err
		}
		for _, l := range lits {
			if n, ok := names[l.value]; ok {
				findings = append(findings, fmt.Sprintf("%s:%d:%d: %q is a wire name: use %s (%s)",
					src, l.line, l.col, l.value, n.ref, n.where))
				continue
			}
			for _, p := range prefixes {
				if rest, ok := strings.CutPrefix(l.value, p.value); ok {
					findings = append(findings, fmt.Sprintf("%s:%d:%d: %q starts with a wire name: use %s + %q (%s)",
						src, l.line, l.col, l.value, p.ref, rest, p.where))
					break
				}
			}
		}
	}
	return findings, nil
}

// definitions reads the string constants of one well_known.go file.
func definitions(root, rel string) ([]wireName, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, 0)
	if err != nil {
		return nil, err
	}
	// apiserver/apis/deckhouse/v1 is imported as deckhousev1.
	dir := filepath.Dir(rel)
	alias := filepath.Base(filepath.Dir(dir)) + filepath.Base(dir)

	var out []wireName
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				pos := fset.Position(name.Pos())
				if i >= len(vs.Values) {
					return nil, fmt.Errorf("%s:%d: constant %s has no value of its own; write its value out in full", rel, pos.Line, name.Name)
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return nil, fmt.Errorf("%s:%d: constant %s is not a plain string literal; write its value out in full so it is checked", rel, pos.Line, name.Name)
				}
				value, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, fmt.Errorf("%s:%d: constant %s: %w", rel, pos.Line, name.Name, err)
				}
				out = append(out, wireName{
					value:    value,
					ref:      alias + "." + name.Name,
					where:    fmt.Sprintf("%s:%d", rel, pos.Line),
					prefix:   strings.HasSuffix(name.Name, "Prefix") || strings.HasSuffix(name.Name, "Domain"),
					unchased: singleWord.MatchString(value) || strings.HasSuffix(name.Name, "Key"),
				})
			}
		}
	}
	return out, nil
}

// literal is one string literal of a source file.
type literal struct {
	value     string
	line, col int
}

// literals lists the string literals of one Go file (comments skipped).
func literals(root, rel string) ([]literal, error) {
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	file := fset.AddFile(rel, fset.Base(), len(src))
	var errs scanner.ErrorList
	var s scanner.Scanner
	s.Init(file, src, func(pos token.Position, msg string) { errs.Add(pos, msg) }, 0)
	var out []literal
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.STRING {
			continue
		}
		value, err := strconv.Unquote(lit)
		if err != nil {
			continue
		}
		p := fset.Position(pos)
		out = append(out, literal{value: value, line: p.Line, col: p.Column})
	}
	if len(errs) > 0 {
		return nil, errs.Err()
	}
	return out, nil
}
