// Package flagtest holds a binary's command line to a golden file, for
// tests: every flag's name, type, default and help, so that a renamed,
// dropped or re-defaulted flag (which manifests, the e2e harness and
// operators' scripts pass) fails a test until the golden file says so.
package flagtest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// UpdateEnv, set to 1, rewrites the golden files instead of comparing.
const UpdateEnv = "UPDATE_FLAGS_GOLDEN"

// Describe is one line per flag of fs, in name order: --name (type)
// default: help.
func Describe(fs *pflag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		fmt.Fprintf(&b, "--%s (%s) %q: %s\n", f.Name, f.Value.Type(), f.DefValue, f.Usage)
	})
	return b.String()
}

// Golden compares Describe(fs) with the file at path (rewriting it when
// UpdateEnv is 1) and fails t naming the first line that differs.
func Golden(t *testing.T, fs *pflag.FlagSet, path string) {
	t.Helper()
	got := Describe(fs)
	if os.Getenv(UpdateEnv) == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with %s=1)", err, UpdateEnv)
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("the command line differs from %s at line %d:\n got: %s\nwant: %s\n(a flag's name, type, default or help changed: manifests and scripts pass them; if that is meant, rewrite the file with %s=1)", path, i+1, g, w, UpdateEnv)
		}
	}
}

// Refused registers a fresh set of flags with addFlags, parses args into
// it as a command line would, and fails t unless validate then refuses
// them with an error that contains every want (the flag's name, what to
// do): an operator reads that message and nothing else.
func Refused(t *testing.T, addFlags func(*pflag.FlagSet), validate func() error, args []string, want ...string) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	err := validate()
	if err == nil {
		t.Errorf("%v accepted, want it refused", args)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%v refused with %q, which does not say %q", args, err, w)
		}
	}
}
