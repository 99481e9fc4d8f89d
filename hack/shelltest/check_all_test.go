package shelltest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB that keeps the failures a check reports
// instead of failing the test that runs the check.
type recorder struct {
	*testing.T
	mu       sync.Mutex
	failures []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// checkAll runs CheckAll on scripts and returns the failures it reported.
func checkAll(t *testing.T, scripts map[string]string, tolerated ...string) []string {
	r := &recorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		CheckAll(r, scripts, tolerated...)
	}()
	<-done
	return r.failures
}

// clean is a script shellcheck has nothing to say about.
const clean = "#!/usr/bin/env bash\nset -euo pipefail\nrm -rf \"${1:?}/\"\n"

func TestCheckAllReportsEachFindingUnderItsScriptsName(t *testing.T) {
	failures := checkAll(t, map[string]string{
		"good.sh":                                 clean,
		"group-a/steps/010_cleanup.sh":            "#!/usr/bin/env bash\nrm -rf $1/\n",
		"group-b/bashible.sh (embedded script 1)": "#!/usr/bin/env bash\necho ok\n",
	})
	if len(failures) != 1 {
		t.Fatalf("want one failure, for 010_cleanup.sh; got %d:\n%s", len(failures), strings.Join(failures, "\n"))
	}
	for _, want := range []string{"group-a/steps/010_cleanup.sh: shellcheck", "line 2: rm -rf $1/", "SC2086"} {
		if !strings.Contains(failures[0], want) {
			t.Errorf("the failure should say %q:\n%s", want, failures[0])
		}
	}
}

func TestCheckAllReportsWhatBashCannotParse(t *testing.T) {
	failures := checkAll(t, map[string]string{"good.sh": clean, "broken.sh": "#!/usr/bin/env bash\nif true; then\n"})
	if len(failures) != 2 || !strings.HasPrefix(failures[0], "broken.sh: bash -n") || !strings.HasPrefix(failures[1], "broken.sh: shellcheck") {
		t.Errorf("want broken.sh's bash -n and shellcheck failures, got:\n%s", strings.Join(failures, "\n"))
	}
}

func TestCheckAllLeavesOutToleratedFindingsOnly(t *testing.T) {
	scripts := map[string]string{"unquoted.sh": "#!/usr/bin/env bash\nls $1\nx=`date`\necho \"$x\"\n"}
	failures := checkAll(t, scripts, "SC2086")
	if len(failures) != 1 || strings.Contains(failures[0], "SC2086") || !strings.Contains(failures[0], "SC2006") {
		t.Errorf("SC2086 tolerated, the backquotes (SC2006) should be reported alone, got:\n%s", strings.Join(failures, "\n"))
	}
	if failures := checkAll(t, scripts, "SC2086", "SC2006"); len(failures) != 0 {
		t.Errorf("with both findings tolerated, nothing should be reported, got:\n%s", strings.Join(failures, "\n"))
	}
}

// Many scripts over several shellcheck processes: each finding still lands
// on its own script, whichever batch checked it.
func TestCheckAllAttributesFindingsAcrossBatches(t *testing.T) {
	scripts := map[string]string{}
	for i := range 40 {
		scripts[fmt.Sprintf("clean-%02d.sh", i)] = clean + strings.Repeat("echo padding\n", i)
	}
	scripts["bad-small.sh"] = "#!/usr/bin/env bash\nrm -rf $1/\n"
	scripts["bad-large.sh"] = "#!/usr/bin/env bash\n" + strings.Repeat("echo padding\n", 500) + "rm -rf $2/\n"
	failures := checkAll(t, scripts)
	got := map[string]bool{}
	for _, f := range failures {
		name, _, _ := strings.Cut(f, ":")
		got[name] = true
	}
	if len(failures) != 2 || !got["bad-small.sh"] || !got["bad-large.sh"] {
		t.Errorf("want failures for bad-small.sh and bad-large.sh only, got:\n%s", strings.Join(failures, "\n"))
	}
	if f := strings.Join(failures, "\n"); !strings.Contains(f, "line 502: rm -rf $2/") {
		t.Errorf("bad-large.sh's finding should name its line:\n%s", f)
	}
}
