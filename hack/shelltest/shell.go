// Package shelltest checks and runs the shell scripts node-manager ships, for
// tests: the golden templates, the manual-bootstrap script and the e2e
// suites that run it. It depends on nothing else of the e2e framework, so
// unit tests use it without a control plane.
package shelltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Check runs bash -n and shellcheck on script (name says which, in
// failures). shellcheck is a Debian package the tests need; `make
// debian-tools` installs it.
func Check(t testing.TB, name, script string) {
	t.Helper()
	CheckTolerating(t, name, script)
}

// CheckTolerating is Check at the same severity (style) with the findings
// named by tolerated (such as SC2086) left out: for scripts this project
// does not write, such as users' published steps, whose known findings a
// test lists with its reasons.
func CheckTolerating(t testing.TB, name, script string, tolerated ...string) {
	t.Helper()
	if err := bashN(script); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	cmd := exec.Command(shellcheck(t), append(shellcheckArgs(tolerated), "-")...)
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("%s: shellcheck: %v\n%s", name, err, out.String())
	}
}

// bashN is what bash -n says of script: nil when bash parses it.
func bashN(script string) error {
	cmd := exec.Command("bash", "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bash -n: %v\n%s", err, out)
	}
	return nil
}

// shellcheck is the path of the shellcheck binary; the test stops when
// there is none.
func shellcheck(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Fatal("shellcheck is not installed; `make debian-tools` installs it from Debian packages")
	}
	return path
}

// shellcheckArgs are the options of every shellcheck run: bash, every
// severity down to style, tolerated findings excluded.
func shellcheckArgs(tolerated []string) []string {
	args := []string{"--shell=bash", "--severity=style"}
	if len(tolerated) > 0 {
		args = append(args, "--exclude="+strings.Join(tolerated, ","))
	}
	return args
}

// runTimeout bounds one run of a script.
const runTimeout = time.Minute

// Run runs script with bash from a file named name in a temporary
// directory, with the test's environment plus env (a later entry wins over
// an earlier one of the same name), and returns its combined output and
// exit code. The test fails when the script cannot be started or is still
// running after a minute.
func Run(t testing.TB, name, script string, env ...string) (string, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", path)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s was still running after %s (killed):\n%s", name, runTimeout, out.String())
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v\n%s", name, err, out.String())
	}
	return out.String(), 0
}
