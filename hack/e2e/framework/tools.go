package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// KubectlCommand is the repository's kubectl (bin/kubectl) with args, as
// the cluster administrator.
func (f *Framework) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	args = append([]string{"--kubeconfig", f.CP.KubeconfigPath()}, args...)
	return exec.CommandContext(ctx, filepath.Join(f.Root, "bin", "kubectl"), args...)
}

// KubectlErr runs kubectl with args and returns its combined output.
func (f *Framework) KubectlErr(t testing.TB, args ...string) (string, error) {
	t.Helper()
	out, err := f.KubectlCommand(Context(t), args...).CombinedOutput()
	return string(out), err
}

// Kubectl runs kubectl with args and returns its combined output; the
// test fails when kubectl does.
func (f *Framework) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := f.KubectlErr(t, args...)
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return out
}

// KubectlApply applies manifest (YAML, read from stdin) with kubectl apply
// and returns what kubectl printed on stderr, where it prints the API's
// warnings ("Warning: ..."); the test fails when kubectl does.
func (f *Framework) KubectlApply(t testing.TB, manifest string) (stderr string) {
	t.Helper()
	cmd := f.KubectlCommand(Context(t), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s", err, out.String(), errOut.String())
	}
	return errOut.String()
}

// EventNotes are the notes of the Events in the default namespace (where
// Events about cluster-scoped objects go) about the object named
// regarding, with reason, in the order the API lists them; the test fails
// when they cannot be listed.
func (f *Framework) EventNotes(t testing.TB, regarding, reason string) []string {
	t.Helper()
	list, err := f.Kube.EventsV1().Events(metav1.NamespaceDefault).List(Context(t), metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("regarding.name", regarding), fields.OneTermEqualSelector("reason", reason)).String(),
	})
	if err != nil {
		t.Fatalf("list the %s Events about %s: %v", reason, regarding, err)
	}
	var notes []string
	for _, e := range list.Items {
		notes = append(notes, e.Note)
	}
	return notes
}

// HasEventNote reports whether an Event about the object named regarding,
// with reason, has a note containing want (any note when want is empty).
func (f *Framework) HasEventNote(t testing.TB, regarding, reason, want string) bool {
	t.Helper()
	return slices.ContainsFunc(f.EventNotes(t, regarding, reason), func(note string) bool { return strings.Contains(note, want) })
}

// WaitEventNote waits for an Event about the object named regarding, with
// reason, whose note contains want (any note when want is empty), and
// returns that note. Controllers' event recorders write asynchronously, so a
// test that expects an Event waits for it instead of listing once.
func (f *Framework) WaitEventNote(t testing.TB, regarding, reason, want string) string {
	t.Helper()
	var found string
	Poll(t, fmt.Sprintf("a %s Event about %s saying %q", reason, regarding, want), func(context.Context) (bool, error) {
		for _, note := range f.EventNotes(t, regarding, reason) {
			if strings.Contains(note, want) {
				found = note
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// ReadFile is a file's content; the test fails when it cannot be read.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
