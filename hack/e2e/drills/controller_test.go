package drills

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// leaseHolder is who holds the Lease namespace/name, "" when nobody does.
func leaseHolder(ctx context.Context, namespace, name string) string {
	l, err := f.Kube.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// controllerLeaseHolder is who holds node-manager-controller's Lease.
func controllerLeaseHolder(ctx context.Context) string {
	return leaseHolder(ctx, deckhousev1.Namespace, deckhousev1.NodeManagerControllerName)
}

// leadingController waits until one of the suite's
// node-manager-controllers holds the Lease and returns it and the others.
func leadingController(t *testing.T) (leader *stack.Controller, rest []*stack.Controller) {
	t.Helper()
	framework.Poll(t, "a node-manager-controller leads", func(ctx context.Context) (bool, error) {
		holder := controllerLeaseHolder(ctx)
		leader, rest = nil, nil
		for _, c := range controllers {
			if c.Identity == holder {
				leader = c
			} else {
				rest = append(rest, c)
			}
		}
		return leader != nil, nil
	})
	return leader, rest
}

// killLeader kills the leading node-manager-controller with SIGKILL (its
// Lease is not released), waits until the standby takes the Lease, and
// starts a new standby in the killed one's place. It returns how long
// the takeover took.
func killLeader(t *testing.T) time.Duration {
	t.Helper()
	leader, rest := leadingController(t)
	leader.Kill()
	killed := time.Now()
	framework.Poll(t, "the standby takes the Lease", func(ctx context.Context) (bool, error) {
		holder := controllerLeaseHolder(ctx)
		return holder != "" && holder != leader.Identity, nil
	})
	takeover := time.Since(killed)
	standby, err := startController(framework.Context(t), fmt.Sprintf("controller-%d", time.Now().UnixNano()%100000))
	if err != nil {
		t.Fatal(err)
	}
	controllers = append(rest, standby)
	return takeover
}

// TestControllerKilledMidApproval: node-manager-controller's leader dies
// (kill -9) while a node is approved; the standby resumes the rollout
// from the Nodes' annotations alone: no node is approved twice, never
// two at once, and the rollout finishes.
func TestControllerKilledMidApproval(t *testing.T) {
	waitAvailable(t)
	m, sum, agents := startRollout(t, "drill-approval")
	start := time.Now()
	takeover := killLeader(t)
	checkRolledOutOnce(t, m, "drill-approval", sum, agents)
	t.Logf("DRILL node-manager-controller kill -9 mid-approval: the standby led %s after the kill; the rollout (%d nodes) finished %s after it, each node approved once, never two at once",
		takeover.Round(100*time.Millisecond), rolloutNodes, time.Since(start).Round(100*time.Millisecond))
}

// holdFinalizer keeps an evicted pod terminating until the drill lets it
// go, so that a drain is in progress for as long as the drill needs.
const holdFinalizer = "drills.node-manager.test/hold"

// TestControllerKilledMidDrain: the leader dies (kill -9) while it drains
// a node (an evicted pod is still terminating); the standby resumes the
// drain from the Node's draining annotation and the pods, finishes it
// once the pod is gone, and the update completes.
func TestControllerKilledMidDrain(t *testing.T) {
	waitAvailable(t)
	const group = "drill-drain"
	f.TestGroup(t, framework.NewGroup(group))
	f.WaitChecksum(t, group, func(sum string) bool { return sum != "" })
	a := f.TestAgent(t, group+"-0", group)
	f.TestAgent(t, group+"-1", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 2)
	m := f.WatchGroup(t, group)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: a.Name + "-app", Namespace: metav1.NamespaceDefault, Finalizers: []string{holdFinalizer}},
		Spec: corev1.PodSpec{NodeName: a.Name, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}},
			TerminationGracePeriodSeconds: new(int64)},
	}
	pod, err := f.Kube.CoreV1().Pods(pod.Namespace).Create(framework.Context(t), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release := func(ctx context.Context) error {
		_, err := f.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return nil
		}
		return err
	}
	t.Cleanup(func() { _ = release(context.Background()) })

	a.Disruptive.Store(true)
	sum := f.NewConfiguration(t, group, "echo drain\n")
	framework.Poll(t, "the drain of "+a.Name+" under way, its pod evicted and terminating", func(ctx context.Context) (bool, error) {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, a.Name, metav1.GetOptions{})
		if err != nil || !nodes.Has(n, deckhousev1.DrainingAnnotation) {
			return false, nil
		}
		p, err := f.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	})
	start := time.Now()
	takeover := killLeader(t)
	if err := release(framework.Context(t)); err != nil {
		t.Fatal(err)
	}
	f.WaitRolledOut(t, group, sum, 2)
	m.Check(t, 1)
	if n := m.Approvals(a.Name); n != 1 {
		t.Errorf("%s was approved %d times; want once", a.Name, n)
	}
	t.Logf("DRILL node-manager-controller kill -9 mid-drain: the standby led %s after the kill, resumed the drain and the update finished %s after the kill",
		takeover.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// TestControllerCutOffStandsByAgain: the leading node-manager-controller
// is cut off from kube-apiserver mid-rollout for longer than its Lease.
// The other controller takes the Lease and finishes the rollout; the
// cut-off one ends its term without exiting (same process, /healthz OK,
// node_manager_leader 0), and once the link is back it re-lists
// everything (/readyz OK again) and stands by: the Lease never goes back
// to it, and no node is approved twice.
func TestControllerCutOffStandsByAgain(t *testing.T) {
	waitAvailable(t)
	const group = "drill-cut"
	m, sum, agents := startRollout(t, group)
	leader, _ := leadingController(t)
	pid := leader.PID()
	holders := recordHolders(t, deckhousev1.Namespace, deckhousev1.NodeManagerControllerName)

	cut := time.Now()
	controllerLinks[leader.Identity].Cut()
	framework.Poll(t, "the other controller takes the Lease", func(ctx context.Context) (bool, error) {
		holder := controllerLeaseHolder(ctx)
		return holder != "" && holder != leader.Identity, nil
	})
	takeover := time.Since(cut)
	// Its /metrics and probes need no kube-apiserver (the admin's
	// certificate, system:masters), so it answers while cut off.
	framework.Poll(t, leader.Identity+", cut off, reports it no longer leads", func(ctx context.Context) (bool, error) {
		v, ok, err := leader.Metric(ctx, "node_manager_leader")
		return err == nil && ok && v == "0", nil
	})
	if code, body, err := leader.GetAs(framework.Context(t), "/healthz", stack.Credentials{}); err != nil || code != http.StatusOK {
		t.Errorf("%s cut off: /healthz %d %s %v; a lost Lease must not make it unhealthy", leader.Identity, code, body, err)
	}
	controllerLinks[leader.Identity].Restore()
	healed := time.Now()
	framework.Poll(t, leader.Identity+" has re-listed and stands by", func(ctx context.Context) (bool, error) {
		code, _, err := leader.GetAs(ctx, "/readyz", stack.Credentials{})
		return err == nil && code == http.StatusOK, nil
	})
	standby := time.Since(healed)
	checkRolledOutOnce(t, m, group, sum, agents)
	holders.stop()

	if leader.Exited() || leader.PID() != pid {
		t.Errorf("%s exited or restarted on losing its Lease; it must stand by in the same process", leader.Identity)
	}
	if v, _, err := leader.Metric(framework.Context(t), "node_manager_leader"); err != nil || v != "0" {
		t.Errorf("%s after the heal: node_manager_leader %q (%v); want 0, the other leads", leader.Identity, v, err)
	}
	history := holders.all()
	if len(history) != 2 || history[0] != leader.Identity {
		t.Errorf("holders of the Lease during the drill: %v; want %s, then the other controller only", history, leader.Identity)
	}
	t.Logf("DRILL node-manager-controller leader cut off from kube-apiserver mid-rollout (%s): the other led %s after the cut; "+
		"the cut-off process kept running (node_manager_leader 0, /healthz OK), re-listed and stood by %s after the link came back; "+
		"Lease holders %v; the rollout (%d nodes) finished %s after the cut, each node approved once, never two at once",
		healed.Sub(cut).Round(100*time.Millisecond), takeover.Round(100*time.Millisecond), standby.Round(100*time.Millisecond),
		history, rolloutNodes, time.Since(cut).Round(100*time.Millisecond))
}
