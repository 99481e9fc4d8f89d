package controllers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// leaseHolder is who holds node-manager-controller's Lease.
func leaseHolder(ctx context.Context) string {
	l, err := f.Kube.CoordinationV1().Leases(deckhousev1.Namespace).Get(ctx, deckhousev1.NodeManagerControllerName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestLeaderFailoverMidRollout kills the suite's controller mid-rollout
// and leaves the survivor. It is the suite's one serial test: Go runs it
// before the parallel ones, which then run against the survivor.
func TestLeaderFailoverMidRollout(t *testing.T) {
	const group = "failover"
	newGroup(t, group, nil)
	var agents []*framework.Agent
	for i := range 4 {
		a := f.TestAgent(t, fmt.Sprintf("failover-%d", i), group)
		a.ApplyTakes.Store(int64(2 * time.Second))
		agents = append(agents, a)
	}
	f.WaitRolledOut(t, group, f.Checksum(t, group), 4)
	standby, err := f.Env.StartController(framework.Context(t), stack.ControllerOptions{Identity: "controller-2", ExtraArgs: controllerArgs})
	if err != nil {
		t.Fatal(err)
	}
	leader := ctrl
	ctrl = standby // whatever happens, later tests use the survivor
	if got := leaseHolder(framework.Context(t)); got != leader.Identity {
		t.Fatalf("the Lease is held by %q; want the first controller %q", got, leader.Identity)
	}
	for _, c := range []*stack.Controller{leader, standby} {
		if code, _, err := c.Get(framework.Context(t), "/readyz"); err != nil || code != http.StatusOK {
			t.Fatalf("%s /readyz: %d %v", c.Identity, code, err)
		}
	}
	if metric(t, standby, "node_manager_leader") != "0" || metric(t, leader, "node_manager_leader") != "1" {
		t.Fatal("node_manager_leader does not tell the leader from the standby")
	}

	m := f.WatchGroup(t, group)
	sum := f.NewConfiguration(t, group, "echo failover\n")
	framework.Poll(t, "first approval", func(ctx context.Context) (bool, error) {
		for _, a := range agents {
			if has(ctx, a.Name, deckhousev1.ApprovedAnnotation) {
				return true, nil
			}
		}
		return false, nil
	})
	leader.Kill() // as a crash: the Lease is not released
	framework.Poll(t, "the standby takes the Lease", func(ctx context.Context) (bool, error) {
		return leaseHolder(ctx) == standby.Identity, nil
	})
	f.WaitRolledOut(t, group, sum, 4)
	m.Check(t, 1)
	if metric(t, standby, "node_manager_leader") != "1" {
		t.Error("the new leader does not report itself as leader")
	}
}

// metric returns the value of an unlabelled metric from a controller.
func metric(t *testing.T, c *stack.Controller, name string) string {
	t.Helper()
	_, body, err := c.Get(framework.Context(t), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("%s has no metric %s", c.Identity, name)
	return ""
}
