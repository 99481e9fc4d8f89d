package stephistory

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

var t0 = time.Date(2026, 11, 22, 21, 0, 0, 0, time.UTC)

// run is a run that completed at t0+minute.
func run(minute int, result deckhousev1alpha1.BashibleRunResult, failed string, steps ...deckhousev1alpha1.BashibleStep) *deckhousev1alpha1.BashibleRun {
	end := t0.Add(time.Duration(minute) * time.Minute)
	return &deckhousev1alpha1.BashibleRun{Checksum: "c", StartTime: metav1.NewTime(end.Add(-time.Minute)), CompletionTime: metav1.NewTime(end),
		Result: result, FailedStep: failed, Steps: steps}
}

func step(name string, attempts int32, ms int64, exit int32) deckhousev1alpha1.BashibleStep {
	return deckhousev1alpha1.BashibleStep{Name: name, Attempts: attempts, DurationMilliseconds: ms, ExitCode: exit}
}

func TestObserveCountsEachRunOnce(t *testing.T) {
	ok1 := run(1, deckhousev1alpha1.BashibleRunSucceeded, "", step("010_a.sh", 1, 10, 0))
	fail2 := run(2, deckhousev1alpha1.BashibleRunFailed, "010_a.sh", step("010_a.sh", 3, 10, 1))
	ok3 := run(3, deckhousev1alpha1.BashibleRunSucceeded, "", step("010_a.sh", 2, 10, 0))
	old := run(-5, deckhousev1alpha1.BashibleRunFailed, "010_a.sh")
	for _, c := range []struct {
		name string
		seen Seen
		st   deckhousev1alpha1.InstanceStatus
		want []*deckhousev1alpha1.BashibleRun
	}{
		{"nothing reported", Seen{}, deckhousev1alpha1.InstanceStatus{}, nil},
		{"a first run", Seen{}, deckhousev1alpha1.InstanceStatus{LastRun: ok1}, []*deckhousev1alpha1.BashibleRun{ok1}},
		{"the same run again", Seen{LastRun: ok1}, deckhousev1alpha1.InstanceStatus{LastRun: ok1.DeepCopy()}, nil},
		{"a failed run is lastRun and lastFailure, counted once", Seen{LastRun: ok1},
			deckhousev1alpha1.InstanceStatus{LastRun: fail2, LastFailure: fail2.DeepCopy()}, []*deckhousev1alpha1.BashibleRun{fail2}},
		{"its lastFailure applied after its lastRun was counted", Seen{LastRun: fail2},
			deckhousev1alpha1.InstanceStatus{LastRun: fail2, LastFailure: fail2.DeepCopy()}, nil},
		{"a success after the failure, the failure kept", Seen{LastRun: fail2, LastFailure: fail2},
			deckhousev1alpha1.InstanceStatus{LastRun: ok3, LastFailure: fail2}, []*deckhousev1alpha1.BashibleRun{ok3}},
		{"a failure and a success both missed in between", Seen{LastRun: ok1},
			deckhousev1alpha1.InstanceStatus{LastRun: ok3, LastFailure: fail2}, []*deckhousev1alpha1.BashibleRun{ok3, fail2}},
		{"runs completed before the controller started", Seen{},
			deckhousev1alpha1.InstanceStatus{LastRun: old, LastFailure: old}, nil},
	} {
		got, seen := Observe(c.seen, c.st, t0)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: counted %d runs %+v, want %d", c.name, len(got), got, len(c.want))
		}
		if !reflect.DeepEqual(seen, Seen{LastRun: c.st.LastRun, LastFailure: c.st.LastFailure}) {
			t.Errorf("%s: remembered %+v, want what the status holds", c.name, seen)
		}
	}
}

func TestSampleFoldsStepsTheBundleDoesNotHaveIntoOther(t *testing.T) {
	bundle := map[string]bool{"010_a.sh": true, "020_flaky.sh": true}
	known := func(s string) bool { return bundle[s] }
	for _, c := range []struct {
		name string
		run  *deckhousev1alpha1.BashibleRun
		want RunSample
	}{
		{"a success with a step retried twice", run(1, deckhousev1alpha1.BashibleRunSucceeded, "",
			step("010_a.sh", 1, 250, 0), step("020_flaky.sh", 3, 2500, 0)),
			RunSample{Group: "g", Result: "Succeeded", Steps: []StepSample{{"010_a.sh", 0.25, 0}, {"020_flaky.sh", 2.5, 2}}}},
		{"a failure at a step the bundle has", run(1, deckhousev1alpha1.BashibleRunFailed, "020_flaky.sh",
			step("010_a.sh", 1, 0, 0), step("020_flaky.sh", 10, 90000, 3)),
			RunSample{Group: "g", Result: "Failed", Steps: []StepSample{{"010_a.sh", 0, 0}, {"020_flaky.sh", 90, 9}}, Failed: "020_flaky.sh"}},
		{"names the bundle does not have", run(1, deckhousev1alpha1.BashibleRunFailed, "999_made_up.sh",
			step("500_renamed.sh", 1, 1000, 0), step("999_made_up.sh", 1, 1000, 1)),
			RunSample{Group: "g", Result: "Failed", Steps: []StepSample{{OtherStep, 1, 0}, {OtherStep, 1, 0}}, Failed: OtherStep}},
		{"a stopped run has no failed step", run(1, deckhousev1alpha1.BashibleRunStopped, "", step("010_a.sh", 1, 0, 0)),
			RunSample{Group: "g", Result: "Stopped", Steps: []StepSample{{"010_a.sh", 0, 0}}}},
	} {
		if got := Sample("g", c.run, known); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
