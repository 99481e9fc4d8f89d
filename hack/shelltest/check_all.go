package shelltest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// CheckAll is CheckTolerating for many scripts at once, by name: bash -n
// on each (a cheap process), and shellcheck over all of them in a few
// processes rather than one per script, for shellcheck's start-up and
// analysis of its own library cost more than most scripts it reads. The
// scripts are written to files whose names say which script each is, and
// every finding is reported under its script's name with its line, level,
// code and message, as Check reports them.
func CheckAll(t testing.TB, scripts map[string]string, tolerated ...string) {
	t.Helper()
	if len(scripts) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(scripts))
	// bash -n starts a process per script: cheap, but on a loaded machine
	// each start waits for a CPU, so they run side by side.
	parseErrs := make([]error, len(names))
	var parsing sync.WaitGroup
	slots := make(chan struct{}, 4*runtime.GOMAXPROCS(0))
	for i, name := range names {
		parsing.Add(1)
		go func() {
			defer parsing.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			parseErrs[i] = bashN(scripts[name])
		}()
	}
	parsing.Wait()
	for i, name := range names {
		if parseErrs[i] != nil {
			t.Errorf("%s: %v", name, parseErrs[i])
		}
	}
	sc := shellcheck(t)
	dir := t.TempDir()
	byFile := make(map[string]string, len(names))
	files := make([]string, len(names))
	for i, name := range names {
		files[i] = filepath.Join(dir, fmt.Sprintf("%03d_%s", i, strings.Trim(unsafeInFileNames.ReplaceAllString(name, "_"), "_")))
		if err := os.WriteFile(files[i], []byte(scripts[name]), 0o600); err != nil {
			t.Fatalf("write %s for shellcheck: %v", name, err)
		}
		byFile[files[i]] = name
	}

	batches := batchesBySize(files, scripts, byFile, runtime.GOMAXPROCS(0))
	findings := make([][]finding, len(batches))
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	for i, batch := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			findings[i], errs[i] = runShellcheck(sc, tolerated, batch)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("shellcheck over %d scripts: %v", len(scripts), err)
	}

	byName := map[string][]finding{}
	for _, batch := range findings {
		for _, f := range batch {
			name, ok := byFile[f.File]
			if !ok {
				t.Errorf("shellcheck reported on %s, which is none of the scripts it was given: %s", f.File, f.Message)
				continue
			}
			byName[name] = append(byName[name], f)
		}
	}
	for _, name := range names {
		if found := byName[name]; len(found) > 0 {
			t.Errorf("%s: shellcheck: %d finding(s)\n%s", name, len(found), describe(found, scripts[name]))
		}
	}
}

// unsafeInFileNames are the characters of a script's name left out of the
// name of the file it is checked as.
var unsafeInFileNames = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// batchesBySize splits files into at most n batches of about equal size in
// bytes (shellcheck's time grows with it), so that shellcheck uses every
// CPU the test may.
func batchesBySize(files []string, scripts, byFile map[string]string, n int) [][]string {
	n = max(1, min(n, len(files)))
	bySize := slices.Clone(files)
	slices.SortStableFunc(bySize, func(a, b string) int { return len(scripts[byFile[b]]) - len(scripts[byFile[a]]) })
	batches, sizes := make([][]string, n), make([]int, n)
	for _, file := range bySize {
		smallest := slices.Index(sizes, slices.Min(sizes))
		batches[smallest] = append(batches[smallest], file)
		sizes[smallest] += len(scripts[byFile[file]])
	}
	return batches
}

// finding is one comment of shellcheck's json1 output.
type finding struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Level   string `json:"level"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// runShellcheck runs one shellcheck over files and returns its findings.
// An error is a run that did not check: shellcheck exits 1 for findings,
// anything else but 0 means it could not do its work.
func runShellcheck(sc string, tolerated, files []string) ([]finding, error) {
	cmd := exec.Command(sc, append(append(shellcheckArgs(tolerated), "--format=json1"), files...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1) {
		return nil, fmt.Errorf("%v\n%s", err, stderr.String())
	}
	var out struct {
		Comments []finding `json:"comments"`
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
		return nil, fmt.Errorf("read its json1 output: %v (exit: %v)\n%s", jerr, err, stderr.String())
	}
	if err != nil && len(out.Comments) == 0 {
		return nil, fmt.Errorf("%v without a finding\n%s", err, stderr.String())
	}
	return out.Comments, nil
}

// describe lists findings as shellcheck's own output does: the line of
// the script, then where, how bad, which check and why.
func describe(found []finding, script string) string {
	lines := strings.Split(script, "\n")
	var b strings.Builder
	for _, f := range found {
		source := ""
		if f.Line >= 1 && f.Line <= len(lines) {
			source = lines[f.Line-1]
		}
		fmt.Fprintf(&b, "line %d: %s\n  column %d: %s SC%d: %s\n", f.Line, source, f.Column, f.Level, f.Code, f.Message)
	}
	return b.String()
}
