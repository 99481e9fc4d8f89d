// Package doclinks_test checks the repository's Markdown pages as a
// reader meets them: every relative link resolves to a file of the
// repository (and an anchor to a heading of that page), every page is
// reachable from README.md, README.md stays a front door, and every alert
// has a runbook. It reads the
// checkout by path, so it runs with the harness's packages
// (`make test-unit`, HARNESS_PKGS), every time.
package doclinks_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// readmeLimit is the size README.md may reach: a newcomer reads it in ten
// minutes. What does not fit goes beside what it describes (docs/).
const readmeLimit = 20 << 10

// skipped are the directories whose Markdown is not the repository's own
// pages: build output, local state, test data kept as published elsewhere.
var skipped = []string{".git", "bin", ".local", "generated", "testdata", "node_modules"}

// page is one Markdown file: its links and the anchors its headings make.
type page struct {
	links   []link
	anchors map[string]bool
}

type link struct {
	line   int
	target string // as written
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	alertRule  = regexp.MustCompile(`(?m)^\s*- alert:\s*([A-Za-z0-9_]+)`)
)

func TestDocumentationLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages := readPages(t, root)
	if _, ok := pages["README.md"]; !ok {
		t.Fatal("README.md not found at the repository's root")
	}
	for _, name := range sortedKeys(pages) {
		for _, l := range pages[name].links {
			if err := check(root, name, l.target, pages); err != nil {
				t.Errorf("%s:%d: link %s: %v", name, l.line, l.target, err)
			}
		}
	}
}

// TestEveryPageIsReachableFromTheREADME: a page no link leads to is a page
// nobody reads.
func TestEveryPageIsReachableFromTheREADME(t *testing.T) {
	root := repoRoot(t)
	pages := readPages(t, root)
	seen := map[string]bool{"README.md": true}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		for _, l := range pages[name].links {
			file, _, local := resolve(name, l.target)
			if !local || !strings.HasSuffix(file, ".md") || seen[file] {
				continue
			}
			if _, ok := pages[file]; ok {
				seen[file] = true
				queue = append(queue, file)
			}
		}
	}
	for _, name := range sortedKeys(pages) {
		if !seen[name] {
			t.Errorf("%s: no chain of links from README.md reaches this page; link it from docs/README.md or the page it belongs beside", name)
		}
	}
}

func TestTheREADMEStaysAFrontDoor(t *testing.T) {
	info, err := os.Stat(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > readmeLimit {
		t.Errorf("README.md is %d bytes, over its %d: move what is not the front door (what it is, the two commands, the tour, the map, the links) to the page under docs/ it belongs to", info.Size(), readmeLimit)
	}
}

// TestEveryAlertHasARunbook: an operator paged by an alert finds what to
// do under a heading of the alert's name on the monitoring page.
func TestEveryAlertHasARunbook(t *testing.T) {
	root := repoRoot(t)
	const runbooks = "docs/operations/monitoring.md"
	pages := readPages(t, root)
	p, ok := pages[runbooks]
	if !ok {
		t.Fatalf("%s not found", runbooks)
	}
	files, err := filepath.Glob(filepath.Join(root, "manifests", "monitoring", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range alertRule.FindAllStringSubmatch(string(text), -1) {
			alerts++
			if !p.anchors[anchor(m[1])] {
				rel, _ := filepath.Rel(root, f)
				t.Errorf("%s: alert %s has no runbook in %s: add a heading \"### %s\" with what it means and what to do", rel, m[1], runbooks, m[1])
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alert found in manifests/monitoring/*.yaml: the pattern no longer matches the rule files")
	}
}

// TestAnchorsFollowGitHub pins the heading-to-anchor rule the link check
// relies on to what GitHub renders.
func TestAnchorsFollowGitHub(t *testing.T) {
	for heading, want := range map[string]string{
		"Joining a machine: from an empty machine to a Ready node": "joining-a-machine-from-an-empty-machine-to-a-ready-node",
		"Fleet scale: `make bench-fleet`":                          "fleet-scale-make-bench-fleet",
		"What `make test` runs":                                    "what-make-test-runs",
		"Runbook — `BashibleAPIServiceUnavailable`":                "runbook--bashibleapiserviceunavailable",
		"Canaries, soaks and halts":                                "canaries-soaks-and-halts",
		"The [API](api.md) types":                                  "the-api-types",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository's root is not %s: %v", root, err)
	}
	return root
}

// readPages reads every Markdown file of the repository, by its path
// relative to root with slashes.
func readPages(t *testing.T, root string) map[string]*page {
	t.Helper()
	pages := map[string]*page{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && slices.Contains(skipped, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pages[filepath.ToSlash(rel)] = parse(text)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the repository's Markdown: %v", err)
	}
	return pages
}

// parse finds the inline links outside code and the anchors of the
// headings outside code blocks, numbering repeated anchors as GitHub does.
func parse(text []byte) *page {
	p := &page{anchors: map[string]bool{}}
	count := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			a := anchor(m[2])
			if c := count[a]; c > 0 {
				p.anchors[fmt.Sprintf("%s-%d", a, c)] = true
			} else {
				p.anchors[a] = true
			}
			count[a]++
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			p.links = append(p.links, link{line: n, target: m[1]})
		}
	}
	return p
}

// anchor is GitHub's anchor for a heading: the text without link targets,
// lower case, every character but letters, digits, spaces, hyphens and
// underscores dropped, spaces made hyphens.
func anchor(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// resolve turns a link of the page from into a repository path and an
// anchor; local is false for links with a scheme (https:, mailto:).
func resolve(from, target string) (file, frag string, local bool) {
	if strings.Contains(strings.SplitN(target, "#", 2)[0], ":") {
		return "", "", false
	}
	file, frag, _ = strings.Cut(target, "#")
	if file == "" {
		return from, frag, true
	}
	return filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), file))), frag, true
}

func check(root, from, target string, pages map[string]*page) error {
	file, frag, local := resolve(from, target)
	if !local {
		return nil
	}
	if file == ".." || strings.HasPrefix(file, "../") || filepath.IsAbs(file) {
		return fmt.Errorf("points outside the repository (%s); the docs name only the repository's own files", file)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
		return fmt.Errorf("no such file or directory %s in the repository", file)
	}
	if frag == "" || !strings.HasSuffix(file, ".md") {
		return nil
	}
	p, ok := pages[file]
	if !ok {
		return fmt.Errorf("%s is not a page this check reads", file)
	}
	if !p.anchors[frag] {
		return fmt.Errorf("%s has no heading whose anchor is #%s", file, frag)
	}
	return nil
}

func sortedKeys(m map[string]*page) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
