package stephistory

import (
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// OtherStep is the step label of a step the group's served bundle does not
// have.
const OtherStep = "other"

// Seen are the runs of one node already counted: the lastRun and
// lastFailure its Instance had when last looked at.
type Seen struct {
	LastRun, LastFailure *deckhousev1alpha1.BashibleRun
}

// counted reports whether run is one of the runs already counted.
func (s Seen) counted(run *deckhousev1alpha1.BashibleRun) bool {
	return equality.Semantic.DeepEqual(run, s.LastRun) || equality.Semantic.DeepEqual(run, s.LastFailure)
}

// Observe returns the runs of an Instance's status not counted yet, and
// what is counted after them. A run is new when it is neither of the
// runs seen before; a failed run is both lastRun and lastFailure, and is
// counted once; a run that completed before since is remembered but not
// counted (whoever watched then counted it).
func Observe(seen Seen, st deckhousev1alpha1.InstanceStatus, since time.Time) ([]*deckhousev1alpha1.BashibleRun, Seen) {
	var runs []*deckhousev1alpha1.BashibleRun
	for _, run := range []*deckhousev1alpha1.BashibleRun{st.LastRun, st.LastFailure} {
		if run == nil || seen.counted(run) || run.CompletionTime.Time.Before(since) {
			continue
		}
		if len(runs) == 1 && equality.Semantic.DeepEqual(runs[0], run) {
			continue
		}
		runs = append(runs, run)
	}
	return runs, Seen{LastRun: st.LastRun.DeepCopy(), LastFailure: st.LastFailure.DeepCopy()}
}

// RunSample is what one run adds to the metrics of its group.
type RunSample struct {
	Group  string
	Result deckhousev1alpha1.BashibleRunResult
	Steps  []StepSample
	// Failed is the step label of the failed step ("" unless Result is Failed).
	Failed string
}

// StepSample is one step of a run under its label.
type StepSample struct {
	Step    string
	Seconds float64
	Retries int
}

// Sample turns a run of a node of group into metric samples; known says
// whether the group's served bundle has a step of that name: any other
// name is labelled OtherStep.
func Sample(group string, run *deckhousev1alpha1.BashibleRun, known func(step string) bool) RunSample {
	label := func(step string) string {
		if known(step) {
			return step
		}
		return OtherStep
	}
	s := RunSample{Group: group, Result: run.Result}
	for _, st := range run.Steps {
		s.Steps = append(s.Steps, StepSample{
			Step:    label(st.Name),
			Seconds: float64(st.DurationMilliseconds) / 1000,
			Retries: max(int(st.Attempts)-1, 0),
		})
	}
	if run.Result == deckhousev1alpha1.BashibleRunFailed && run.FailedStep != "" {
		s.Failed = label(run.FailedStep)
	}
	return s
}
