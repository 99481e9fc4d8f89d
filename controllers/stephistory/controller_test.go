package stephistory

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// TestInstancesStepHistoryReachesTheRegistry: the history a node reports
// on its Instance shows in the controller's registry by group and step, a
// failed run is counted once although it is both lastRun and lastFailure,
// and the series go with the group's bundle.
func TestInstancesStepHistoryReachesTheRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failed := run(1, deckhousev1alpha1.BashibleRunFailed, "020_flaky.sh", step("010_a.sh", 1, 200, 0), step("020_flaky.sh", 3, 4000, 9))
	inst := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{deckhousev1.NodeGroupLabel: "g"}},
		Status: deckhousev1alpha1.InstanceStatus{LastRun: failed, LastFailure: failed.DeepCopy()}}
	bundle := &bashiblev1alpha1.NodeGroupBundle{ObjectMeta: metav1.ObjectMeta{Name: "g"},
		Data: map[string]string{"010_a.sh": "true", "020_flaky.sh": "true"}}
	nm := nmfake.NewSimpleClientset(inst, bundle)
	reg := prometheus.NewRegistry()
	d := manager.NewDepsForClients(kubefake.NewClientset(), nm, manager.NewOptions(), clocktesting.NewFakeClock(t0), reg)
	c := New(d)
	d.Informers.NodeManager.Start(ctx.Done())
	d.Informers.Bundles.Start(ctx.Done())
	go c.Run(ctx, 1)

	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll("the failed run counted", func() bool {
		return testutil.ToFloat64(c.metrics.Failures.WithLabelValues("g", "020_flaky.sh")) == 1
	})
	if got := testutil.ToFloat64(c.metrics.Retries.WithLabelValues("g", "020_flaky.sh")); got != 2 {
		t.Errorf("retries of 020_flaky.sh: %v, want 2", got)
	}
	if got := testutil.ToFloat64(c.metrics.Runs.WithLabelValues("g", "Failed")); got != 1 {
		t.Errorf("failed runs: %v, want 1 (lastRun and lastFailure are one run)", got)
	}
	if n, err := testutil.GatherAndCount(reg, "node_manager_bashible_step_duration_seconds"); err != nil || n != 2 {
		t.Errorf("duration series: %d (%v), want one per step", n, err)
	}
	// The served resource is read-only; its watch still reports a deletion.
	if err := nm.Tracker().Delete(bashiblev1alpha1.SchemeGroupVersion.WithResource("nodegroupbundles"), "", "g"); err != nil {
		t.Fatal(err)
	}
	poll("the group's series dropped with its bundle", func() bool {
		n, _ := testutil.GatherAndCount(reg, "node_manager_bashible_step_duration_seconds", "node_manager_bashible_step_retries_total",
			"node_manager_bashible_step_failures_total", "node_manager_bashible_runs_total")
		return n == 0
	})
}
