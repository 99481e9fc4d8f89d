package drills

import (
	"context"
	"fmt"
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

// killLeader kills the leading node-manager-controller with SIGKILL (its
// Lease is not released), waits until the standby takes the Lease, and
// starts a new standby in the killed one's place. It returns how long
// the takeover took.
func killLeader(t *testing.T) time.Duration {
	t.Helper()
	var leader *stack.Controller
	var rest []*stack.Controller
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
	leader.Kill()
	killed := time.Now()
	framework.Poll(t, "the standby takes the Lease", func(ctx context.Context) (bool, error) {
		holder := controllerLeaseHolder(ctx)
		return holder != "" && holder != leader.Identity, nil
	})
	takeover := time.Since(killed)
	standby, err := f.Env.StartController(framework.Context(t), stack.ControllerOptions{
		Identity: fmt.Sprintf("controller-%d", time.Now().UnixNano()%100000), ExtraArgs: controllerArgs})
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
