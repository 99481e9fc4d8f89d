package controllers

import (
	"context"
	"fmt"
	"testing"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestStepHistoryBecomesMetrics: the real bashible.sh reports its runs on
// two nodes' Instances, one whose step fails twice and then succeeds and
// one whose step fails; node-manager-controller's /metrics count the
// retries, the failure and both runs' step durations, by group and step.
func TestStepHistoryBecomesMetrics(t *testing.T) {
	t.Parallel()
	runsRealBashible(t)
	const group, step = "history", "030_on_demand.sh"
	newGroup(t, group, nil)
	dir := t.TempDir()
	flaky, failing := newRealNode(t, dir, "history-flaky", group), newRealNode(t, dir, "history-failing", group)
	if err := flaky.Write("control/flaky", "2"); err != nil {
		t.Fatal(err)
	}
	if err := failing.Control("fail", true); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*realNode{flaky, failing} {
		run, err := n.RunOnce(framework.Context(t), "--max-retries", "3")
		if err != nil || (run.ExitCode == 0) != (n == flaky) {
			t.Fatalf("bashible on %s: %v, exit %d\n%s", n.Name, err, run.ExitCode, run.Output)
		}
	}
	labels := fmt.Sprintf(`{node_group=%q,step=%q}`, group, step)
	for series, want := range map[string]string{
		"node_manager_bashible_step_retries_total" + labels:                                      "4", // 2 before the success, 2 before the last failure
		"node_manager_bashible_step_failures_total" + labels:                                     "1",
		"node_manager_bashible_step_duration_seconds_count" + labels:                             "2",
		fmt.Sprintf(`node_manager_bashible_runs_total{node_group=%q,result="Failed"}`, group):    "1",
		fmt.Sprintf(`node_manager_bashible_runs_total{node_group=%q,result="Succeeded"}`, group): "1",
	} {
		framework.Poll(t, series+" = "+want, func(ctx context.Context) (bool, error) {
			v, ok, err := ctrl.Metric(ctx, series)
			return ok && v == want, err
		})
	}
}
