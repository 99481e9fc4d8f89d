package staticmachines

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// TestAnUnpinnedInstanceIsRefusedNotBound (issue 35, item 5) wires the
// controller to fake clients: a StaticInstance with neither a pinned host
// key nor an admin's leave to trust on first use is reported Error with
// reason HostKeyNotPinned and never bound, though it is the only one and
// matches; once an admin allows trust on first use it is Pending and bound.
func TestAnUnpinnedInstanceIsRefusedNotBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	role := map[string]string{"role": "w"}
	inst := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: "unpinned", UID: "uid-u", Labels: role,
		CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}, Spec: deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.7"}}
	kube, nm := kubefake.NewClientset(), nmfake.NewClientset(inst)
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clocktesting.NewFakeClock(t0), prometheus.NewRegistry())
	c := New(d, NewOptions())
	if !d.Start(ctx, Name, c.synced...) {
		t.Fatal("caches did not sync")
	}
	instances := nm.DeckhouseV1alpha2().StaticInstances()
	sm := &infrav1alpha1.StaticMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-1", UID: "uid-m"},
		Spec: infrav1alpha1.StaticMachineSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: role}}}

	if err := c.syncFree(ctx, inst.Name); err != nil {
		t.Fatal(err)
	}
	got, err := instances.Get(ctx, inst.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, condHostKey)
	if phaseOf(got) != errored || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reasonHostKeyNotPinned {
		t.Errorf("an unpinned instance without trust on first use: phase %q, condition %+v; want Error, HostKeyNotPinned", phaseOf(got), cond)
	}
	// Bound at once if it were Pending: the refusal must not depend on
	// the Error phase's retry delay.
	if bound, err := c.bind(ctx, machinePrefix+"ns/m-1", sm, t0.Add(time.Hour)); err != nil || bound != nil {
		t.Fatalf("an unpinned instance was bound: %v (%v)", bound, err)
	}

	got.Annotations = map[string]string{deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation: "true"}
	if _, err := instances.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cached, err := c.instances.Get(inst.Name)
		return err == nil && trustOnFirstUse(cached), nil
	})
	if err != nil {
		t.Fatal("the cache did not follow")
	}
	if err := c.syncFree(ctx, inst.Name); err != nil {
		t.Fatal(err)
	}
	got, _ = instances.Get(ctx, inst.Name, metav1.GetOptions{})
	if cond := meta.FindStatusCondition(got.Status.Conditions, condHostKey); phaseOf(got) != pending || cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("once trust on first use is allowed: phase %q, condition %+v; want Pending", phaseOf(got), cond)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cached, err := c.instances.Get(inst.Name)
		return err == nil && phaseOf(cached) == pending, nil
	})
	if err != nil {
		t.Fatal("the cache did not follow")
	}
	if bound, err := c.bind(ctx, machinePrefix+"ns/m-1", sm, t0); err != nil || bound == nil || bound.Name != inst.Name {
		t.Errorf("once trusted: bound %v (%v), want %s", bound, err, inst.Name)
	}
}

// TestDecideRefusesToContactAnUnpinnedHost: a bound instance whose key is
// neither pinned nor trusted on first use (an admin removed the
// annotation) is never contacted: Error with reason HostKeyNotPinned,
// released, where it would have run its bootstrap, adoption or cleanup.
func TestDecideRefusesToContactAnUnpinnedHost(t *testing.T) {
	for name, s := range map[string]situation{
		"bootstrap":            at(bootstrapping, time.Minute),
		"adoption":             with(at(bootstrapping, time.Minute), func(s *situation) { s.adopt = true }),
		"cleanup of a deleted": with(at(running, time.Hour), func(s *situation) { s.deleting = true }),
	} {
		if st := decide(s); st.run == "" {
			t.Fatalf("%s: with a trusted key, want an SSH operation, got %s", name, describe(st))
		}
		s.hostKeyNotPinned = true
		st := decide(s)
		if st.run != "" || st.phase != errored || !st.release || st.condition == nil || st.condition.Reason != reasonHostKeyNotPinned {
			t.Errorf("%s: an unpinned host: %s; want Error, released, HostKeyNotPinned, nothing run", name, describe(st))
		}
	}
}
