package templates

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// runStatus decodes what bashible applied under manager as an Instance
// status, "" when it applied nothing there.
func runStatus(t *testing.T, api *fakeAPI, manager string) *deckhousev1alpha1.InstanceStatus {
	t.Helper()
	applied, ok := api.applied[manager]
	if !ok {
		return nil
	}
	data, _ := json.Marshal(applied)
	var st deckhousev1alpha1.InstanceStatus
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("bashible applied a status that is no Instance status under %s: %v\n%s", manager, err, data)
	}
	return &st
}

// flaky fails until it has run three times (its count is kept in the node's
// root), then succeeds.
const flaky = `n=$(( $(cat "$BASHIBLE_ROOT/flaky" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$BASHIBLE_ROOT/flaky"
if (( n < 3 )); then echo "flaky attempt $n fails"; exit 7; fi
`

// A run reports every step it ran with its attempts, duration and exit
// status as the Instance's lastRun: a step that fails twice and then
// succeeds shows three attempts; a successful run leaves lastFailure alone.
func TestAgentReportsEachStepsAttemptsDurationAndExitStatus(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{instance: true, bundle: bundleOf(map[string]string{
		"010_quick.sh": "true\n",
		"020_flaky.sh": flaky,
		"030_slow.sh":  "sleep 0.3\n",
	}), annotations: map[string]any{deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, _, ok := runAgent(t, api, "--max-retries", "3")
	if !ok {
		t.Fatalf("the run failed:\n%s", out)
	}
	if runStatus(t, api, deckhousev1.BashibleLastFailureFieldManager) != nil {
		t.Errorf("a successful run reported a failure: %v", api.applied)
	}
	st := runStatus(t, api, deckhousev1.BashibleLastRunFieldManager)
	if st == nil || st.LastRun == nil {
		t.Fatalf("no lastRun applied as %s: %v\n%s", deckhousev1.BashibleLastRunFieldManager, api.applied, out)
	}
	run := st.LastRun
	if run.Result != deckhousev1alpha1.BashibleRunSucceeded || run.Checksum != "new" || run.FailedStep != "" || run.Message != "" ||
		run.StartTime.IsZero() || run.CompletionTime.Before(&run.StartTime) {
		t.Errorf("lastRun: %+v", run)
	}
	var got []string
	for _, s := range run.Steps {
		got = append(got, fmt.Sprintf("%s attempts=%d exit=%d", s.Name, s.Attempts, s.ExitCode))
	}
	if want := []string{"010_quick.sh attempts=1 exit=0", "020_flaky.sh attempts=3 exit=0", "030_slow.sh attempts=1 exit=0"}; strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("steps: %v, want %v", got, want)
	}
	if len(run.Steps) == 3 && (run.Steps[2].DurationMilliseconds < 300 || run.Steps[2].DurationMilliseconds > 10000) {
		t.Errorf("030_slow.sh sleeps 0.3 s, reported %d ms", run.Steps[2].DurationMilliseconds)
	}
}

// A failed run reports the failed step, its exit status and last output as
// both lastRun and lastFailure (under their own field managers); steps
// after it did not run and are not listed.
func TestAgentReportsAFailedRunAsLastRunAndLastFailure(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{instance: true, bundle: bundleOf(map[string]string{
		"010_quick.sh": "true\n",
		"020_fails.sh": "echo \"the disk is full\" >&2\nexit 5\n",
		"030_never.sh": "true\n",
	}), annotations: map[string]any{deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, _, ok := runAgent(t, api, "--max-retries", "2")
	if ok {
		t.Fatalf("a run with a failing step succeeded:\n%s", out)
	}
	for _, manager := range []string{deckhousev1.BashibleLastRunFieldManager, deckhousev1.BashibleLastFailureFieldManager} {
		st := runStatus(t, api, manager)
		if st == nil {
			t.Fatalf("nothing applied as %s: %v\n%s", manager, api.applied, out)
		}
		run := st.LastRun
		if manager == deckhousev1.BashibleLastFailureFieldManager {
			run = st.LastFailure
			if st.LastRun != nil {
				t.Errorf("%s applied lastRun too; each field has its own manager", manager)
			}
		}
		if run == nil || run.Result != deckhousev1alpha1.BashibleRunFailed || run.FailedStep != "020_fails.sh" ||
			!strings.Contains(run.Message, "exit status 5") || !strings.Contains(run.Message, "the disk is full") {
			t.Fatalf("%s: %+v", manager, run)
		}
		if len(run.Steps) != 2 || run.Steps[1].Name != "020_fails.sh" || run.Steps[1].Attempts != 2 || run.Steps[1].ExitCode != 5 {
			t.Errorf("%s: steps %+v", manager, run.Steps)
		}
	}
}

// The history is bounded as the Instance type says: bashible.sh lists at
// most MaxReportedSteps steps, the last ones, and counts the others; the
// message is cut to 1000 bytes. The run here has a cap of 2 instead (the
// script's own line, checked first, changed), so it needs few steps.
func TestAgentBoundsTheReportedRun(t *testing.T) {
	t.Parallel()
	script := mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible
	line := fmt.Sprintf("\nMAX_REPORTED_STEPS=%d\n", deckhousev1alpha1.MaxReportedSteps)
	if !strings.Contains(script, line) {
		t.Fatalf("bashible.sh should cap the reported steps at deckhousev1alpha1.MaxReportedSteps with the line %q", line)
	}
	script = strings.Replace(script, line, "\nMAX_REPORTED_STEPS=2\n", 1)
	api := &fakeAPI{instance: true, bundle: bundleOf(map[string]string{
		"010_a.sh": "true\n", "020_b.sh": "true\n", "030_c.sh": "true\n",
		"040_loud.sh": "head -c 5000 /dev/zero | tr '\\0' x; echo\nexit 1\n",
	}), annotations: map[string]any{deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, _, _ := runScript(t, api, script)
	st := runStatus(t, api, deckhousev1.BashibleLastRunFieldManager)
	if st == nil || st.LastRun == nil {
		t.Fatalf("no lastRun: %v\n%s", api.applied, out)
	}
	run := st.LastRun
	var names []string
	for _, s := range run.Steps {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "030_c.sh 040_loud.sh" || run.OmittedSteps != 2 || run.FailedStep != "040_loud.sh" {
		t.Errorf("listed %v, %d omitted, failed %q; want the last two, 2 omitted, failed 040_loud.sh", names, run.OmittedSteps, run.FailedStep)
	}
	if len(run.Message) > 1000 || !strings.Contains(run.Message, "xxxx") {
		t.Errorf("message of %d bytes: %.100q", len(run.Message), run.Message)
	}
}
