package bashible

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

const onDemandStep = "030_on_demand.sh"

func instanceStatus(t *testing.T, node string) deckhousev1alpha1.InstanceStatus {
	t.Helper()
	inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(framework.Context(t), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return inst.Status
}

// TestStepHistoryIsReportedOnTheInstance: a run whose step fails twice and
// then succeeds shows, on the node's Instance, every step it ran with one
// attempt and that step with three, their durations (the two retry delays
// of a second count) and exit statuses; a run that fails shows the failed
// step as lastRun and lastFailure, and in `kubectl get instances`.
func TestStepHistoryIsReportedOnTheInstance(t *testing.T) {
	t.Parallel()
	flaky := newNode(t, "hist-flaky", "sim")
	if err := flaky.Write("control/flaky", "2"); err != nil {
		t.Fatal(err)
	}
	run := mustRun(t, flaky, "--max-retries", "3")
	st := instanceStatus(t, flaky.Name)
	last := st.LastRun
	if last == nil || last.Result != deckhousev1alpha1.BashibleRunSucceeded || last.Checksum != f.Checksum(t, "sim") || st.LastFailure != nil {
		t.Fatalf("after a successful run: lastRun %+v, lastFailure %+v\n%s", last, st.LastFailure, run.Output)
	}
	found := false
	for _, s := range last.Steps {
		want := int32(1)
		if s.Name == onDemandStep {
			found, want = true, 3
			if s.DurationMilliseconds < 2000 {
				t.Errorf("%s waited two retry delays of 1 s, reported %d ms", s.Name, s.DurationMilliseconds)
			}
		}
		if s.Attempts != want || s.ExitCode != 0 {
			t.Errorf("step %s: %d attempts, exit %d; want %d, 0", s.Name, s.Attempts, s.ExitCode, want)
		}
	}
	if !found || len(last.Steps) < 3 {
		t.Errorf("steps reported: %+v", last.Steps)
	}

	failing := newNode(t, "hist-failing", "sim")
	if err := failing.Control("fail", true); err != nil {
		t.Fatal(err)
	}
	if run, err := failing.RunOnce(framework.Context(t), "--max-retries", "2"); err != nil || run.ExitCode == 0 {
		t.Fatalf("a run with a failing step: %v, exit %d\n%s", err, run.ExitCode, run.Output)
	}
	st = instanceStatus(t, failing.Name)
	for what, r := range map[string]*deckhousev1alpha1.BashibleRun{"lastRun": st.LastRun, "lastFailure": st.LastFailure} {
		if r == nil || r.Result != deckhousev1alpha1.BashibleRunFailed || r.FailedStep != onDemandStep || !strings.Contains(r.Message, "failing on demand") {
			t.Fatalf("%s after a failed run: %+v", what, r)
		}
		if s := r.Steps[len(r.Steps)-1]; s.Name != onDemandStep || s.Attempts != 2 || s.ExitCode != 3 {
			t.Errorf("%s: the failed step reported as %+v; want 2 attempts, exit 3", what, s)
		}
	}
	out := f.Kubectl(t, "get", "instances", failing.Name, flaky.Name)
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "FAILED STEP") || !strings.Contains(out, failing.Name) ||
		!strings.Contains(lines[1]+lines[2], onDemandStep) || strings.Count(out, onDemandStep) != 1 {
		t.Errorf("kubectl get instances should show the failing step of %s only:\n%s", failing.Name, out)
	}
}
