package staticmachines

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
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

// TestAUsedAddressIsRefusedBeforeBinding wires the controller to fake
// clients: the StaticInstance at a Node's address is reported refused
// (syncFree) and never bound, though it is the one Pending the longest;
// once the Node is gone it is Pending again.
func TestAUsedAddressIsRefusedBeforeBinding(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	role := map[string]string{"role": "w"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "manual-0"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}}}}
	// Both hosts' keys are pinned: only the address is in question here.
	pinned := map[string]string{deckhousev1.SSHHostKeyAnnotation: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA"}
	used := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: "a-used", UID: "uid-a", Labels: role, Annotations: pinned,
		CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}, Spec: deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.5"}}
	free := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: "b-free", UID: "uid-b", Labels: role, Annotations: pinned,
		CreationTimestamp: metav1.NewTime(t0)}, Spec: deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.6"}}
	kube, nm := kubefake.NewClientset(node), nmfake.NewClientset(used, free)
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clocktesting.NewFakeClock(t0), prometheus.NewRegistry())
	c := New(d, NewOptions())
	if !d.Start(ctx, Name, c.synced...) {
		t.Fatal("caches did not sync")
	}

	if err := c.syncFree(ctx, used.Name); err != nil {
		t.Fatal(err)
	}
	got, err := nm.DeckhouseV1alpha2().StaticInstances().Get(ctx, used.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, condAddress)
	if phaseOf(got) != errored || cond == nil || cond.Reason != reasonAddressUsed || !strings.Contains(cond.Message, "Node manual-0") {
		t.Fatalf("the instance at Node manual-0's address: phase %q, condition %+v", phaseOf(got), cond)
	}

	sm := &infrav1alpha1.StaticMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-1", UID: "uid-m"},
		Spec: infrav1alpha1.StaticMachineSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: role}}}
	bound, err := c.bind(ctx, machinePrefix+"ns/m-1", sm, t0)
	if err != nil || bound == nil || bound.Name != free.Name {
		t.Fatalf("bound %v (%v), want %s", bound, err, free.Name)
	}

	if err := kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cached, err := c.instances.Get(used.Name)
		return len(c.nodesAt("10.0.0.5")) == 0 && err == nil && phaseOf(cached) == errored, nil
	})
	if err != nil {
		t.Fatal("the caches did not follow")
	}
	if err := c.syncFree(ctx, used.Name); err != nil {
		t.Fatal(err)
	}
	got, _ = nm.DeckhouseV1alpha2().StaticInstances().Get(ctx, used.Name, metav1.GetOptions{})
	if cond := meta.FindStatusCondition(got.Status.Conditions, condAddress); phaseOf(got) != pending || cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("once the Node is gone: phase %q, condition %+v", phaseOf(got), cond)
	}
}

// TestTheHostWaitingLongestIsPickedBeforeTheInformerSeesIt: a machine gets
// the host Pending the longest even when the informer has not yet shown
// it (here: stopped before the host's StaticInstance is created), not the
// host released a moment ago that the informer holds.
func TestTheHostWaitingLongestIsPickedBeforeTheInformerSeesIt(t *testing.T) {
	ctx := context.Background()
	informers, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	role := map[string]string{"role": "w"}
	pinned := map[string]string{deckhousev1.SSHHostKeyAnnotation: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA"}
	released := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: "a-released", UID: "uid-a", Labels: role, Annotations: pinned,
		CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}, Spec: deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.5"},
		Status: deckhousev1alpha2.StaticInstanceStatus{CurrentStatus: &deckhousev1alpha2.StaticInstanceCurrentStatus{
			Phase: deckhousev1alpha2.StaticInstancePending, LastUpdateTime: &metav1.Time{Time: t0}}}}
	kube, nm := kubefake.NewClientset(), nmfake.NewClientset(released)
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clocktesting.NewFakeClock(t0), prometheus.NewRegistry())
	c := New(d, NewOptions())
	if !d.Start(informers, Name, c.synced...) {
		t.Fatal("caches did not sync")
	}
	stopInformers()
	spare := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: "b-spare", UID: "uid-b", Labels: role, Annotations: pinned,
		CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute))}, Spec: deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.6"}}
	if err := nm.Tracker().Add(spare); err != nil {
		t.Fatal(err)
	}
	sm := &infrav1alpha1.StaticMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-1", UID: "uid-m"},
		Spec: infrav1alpha1.StaticMachineSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: role}}}
	bound, err := c.bind(ctx, machinePrefix+"ns/m-1", sm, t0.Add(time.Second))
	if err != nil || bound == nil || bound.Name != spare.Name {
		t.Fatalf("bound %v (%v), want %s, Pending since before %s was released", bound, err, spare.Name, released.Name)
	}
}
