package drain

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodes"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// harness runs the drain controller against fake clients. Evictions of
// pods named in blocked are refused as a PodDisruptionBudget would;
// others delete the pod. prepare runs before anything starts (reactors
// cannot be added to a client in use).
type harness struct {
	kube    *kubefake.Clientset
	c       *Controller
	blocked map[string]bool
}

func newHarness(t *testing.T, policy deckhousev1.DrainTimeoutPolicy, prepare ...func(*harness)) *harness {
	t.Helper()
	h := &harness{blocked: map[string]bool{}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{deckhousev1.NodeGroupLabel: "w"}}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "a"}}
	h.kube = kubefake.NewClientset(node, pod)
	h.kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		if h.blocked[name] {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, h.kube.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "default", name)
	})
	timeout := int32(1)
	nm := nmfake.NewClientset(&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{deckhousev1.NodeGroupLabel: "w"}}},
		&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w"},
			Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, NodeDrainTimeoutSecond: &timeout,
				Disruptions: &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalAutomatic,
					Automatic: &deckhousev1.AutomaticDisruptions{DrainTimeoutPolicy: policy}}}})
	opts := NewOptions()
	opts.EvictionRetry = 100 * time.Millisecond
	d := manager.NewDepsForClients(h.kube, nm, manager.NewOptions(), clock.RealClock{}, prometheus.NewRegistry())
	h.c = New(d, opts)
	for _, p := range prepare {
		p(h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	done := make(chan struct{})
	go func() { h.c.Run(ctx, 1); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		// Every drain goroutine ends with the controller (a generous
		// bound: a loaded machine delays the ending, not its outcome).
		deadline := time.Now().Add(30 * time.Second)
		for h.c.runningCount() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := h.c.runningCount(); n != 0 {
			t.Errorf("%d drains still tracked after the controller stopped", n)
		}
	})
	return h
}

func (c *Controller) runningCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.running)
}

func (h *harness) annotate(t *testing.T, key string, value *string) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + key + `":null}}}`
	if value != nil {
		patch = `{"metadata":{"annotations":{"` + key + `":"` + *value + `"}}}`
	}
	if _, err := h.kube.CoreV1().Nodes().Patch(context.Background(), "a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) waitNode(t *testing.T, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := h.kube.CoreV1().Nodes().Get(context.Background(), "a", metav1.GetOptions{})
		if err == nil && cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: node %+v", what, n.Annotations)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDrainEvictsThenRecordsDrained(t *testing.T) {
	h := newHarness(t, "")
	h.annotate(t, deckhousev1.DrainingAnnotation, ptr.To("bashible"))
	n := h.waitNode(t, "drained", func(n *corev1.Node) bool { return nodes.Has(n, deckhousev1.DrainedAnnotation) })
	if !n.Spec.Unschedulable || nodes.Has(n, deckhousev1.DrainingAnnotation) || n.Annotations[deckhousev1.DrainedAnnotation] != "bashible" {
		t.Errorf("after the drain: unschedulable %v annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	if _, err := h.kube.CoreV1().Pods("default").Get(context.Background(), "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod is still there: %v", err)
	}
}

// TestSuccessIsNotCancelledByItsOwnWrite: the drain's success removes the
// draining annotation; the informer may deliver that before the write's
// response reaches the drain, and the sync it triggers must not take the
// drain for cancelled (it once did: no DrainSucceeded, a cancelled count).
func TestSuccessIsNotCancelledByItsOwnWrite(t *testing.T) {
	var echoed atomic.Bool
	h := newHarness(t, "", func(h *harness) {
		h.kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return h.echo(a, &echoed)
		})
	})
	h.annotate(t, deckhousev1.DrainingAnnotation, ptr.To("bashible"))
	h.waitNode(t, "drained and the drain finished", func(n *corev1.Node) bool {
		return nodes.Has(n, deckhousev1.DrainedAnnotation) && h.c.runningCount() == 0
	})
	if !echoed.Load() {
		t.Fatal("the success was never written")
	}
	if got := testutil.ToFloat64(h.c.metrics.Drains.WithLabelValues("cancelled")); got != 0 {
		t.Errorf("the successful drain was counted as cancelled %v times", got)
	}
	if got := testutil.ToFloat64(h.c.metrics.Drains.WithLabelValues("succeeded")); got != 1 {
		t.Errorf("succeeded drains %v, want 1", got)
	}
}

func TestBlockedDrainFailsNeverDrainedAndCancels(t *testing.T) {
	h := newHarness(t, deckhousev1.DrainTimeoutWait)
	h.blocked["db"] = true
	h.annotate(t, deckhousev1.DrainingAnnotation, ptr.To("bashible"))
	n := h.waitNode(t, "drain-failed", func(n *corev1.Node) bool { return nodes.Has(n, deckhousev1.DrainFailedAnnotation) })
	if nodes.Has(n, deckhousev1.DrainedAnnotation) {
		t.Fatal("a failed drain was recorded as drained")
	}
	// Cancel and ask again at once: the first run's exit must not make the
	// controller lose track of the second.
	for range 3 {
		h.annotate(t, deckhousev1.DrainingAnnotation, nil)
		h.waitNode(t, "the cancel seen", func(*corev1.Node) bool { return h.c.runningCount() == 0 })
		h.annotate(t, deckhousev1.DrainingAnnotation, ptr.To("bashible"))
		h.waitNode(t, "the new drain started", func(*corev1.Node) bool { return h.c.runningCount() == 1 })
	}
	time.Sleep(300 * time.Millisecond)
	if got := h.c.runningCount(); got != 1 {
		t.Fatalf("%d drains tracked after cancel-and-restart; want the newest one", got)
	}
	h.annotate(t, deckhousev1.DrainingAnnotation, nil)
	deadline := time.Now().Add(30 * time.Second) // the informer's event, then the sync
	for h.c.runningCount() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := h.c.runningCount(); got != 0 {
		t.Fatalf("%d drains still running after draining was removed", got)
	}
	h.waitNode(t, "drain-failed cleared", func(n *corev1.Node) bool { return !nodes.Has(n, deckhousev1.DrainFailedAnnotation) })
	// The pod is still there, and nothing drains it any more.
	if _, err := h.kube.CoreV1().Pods("default").Get(context.Background(), "db", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	h.blocked["db"] = false
	time.Sleep(300 * time.Millisecond)
	if _, err := h.kube.CoreV1().Pods("default").Get(context.Background(), "db", metav1.GetOptions{}); errors.Is(err, context.Canceled) || apierrors.IsNotFound(err) {
		t.Fatal("a cancelled drain went on evicting")
	}
}

func TestBlockedPodIsDeletedAtTheDeadlineByDefault(t *testing.T) {
	h := newHarness(t, "")
	h.blocked["db"] = true
	h.annotate(t, deckhousev1.DrainingAnnotation, ptr.To("bashible"))
	n := h.waitNode(t, "drained", func(n *corev1.Node) bool { return nodes.Has(n, deckhousev1.DrainedAnnotation) })
	if nodes.Has(n, deckhousev1.DrainFailedAnnotation) || nodes.Has(n, deckhousev1.DrainingAnnotation) {
		t.Errorf("after the deadline's deletion: %v", n.Annotations)
	}
	if _, err := h.kube.CoreV1().Pods("default").Get(context.Background(), "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod the budget kept is still there: %v", err)
	}
	evicted, deleted := 0, 0
	for _, a := range h.kube.Actions() {
		switch {
		case a.GetVerb() == "create" && a.GetSubresource() == "eviction":
			evicted++
		case a.GetVerb() == "delete" && a.GetResource().Resource == "pods":
			deleted++
		}
	}
	if evicted == 0 || deleted != 1 {
		t.Errorf("%d evictions and %d deletions; want evictions tried first, then one deletion", evicted, deleted)
	}
}

// echo applies the drain's success patch (once) and, before answering it,
// waits for the informer to see it and syncs the node, as the controller's
// queue may do before the response arrives.
func (h *harness) echo(a k8stesting.Action, done *atomic.Bool) (bool, runtime.Object, error) {
	if done.Load() || !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), deckhousev1.DrainedAnnotation) {
		return false, nil, nil
	}
	done.Store(true)
	// Apply the success, then let its echo be synced before answering.
	handled, n, err := k8stesting.ObjectReaction(h.kube.Tracker())(a)
	if err != nil {
		return handled, n, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := h.c.d.Nodes.Get("a")
		if err == nil && !nodes.Has(cur, deckhousev1.DrainingAnnotation) {
			break
		}
		if time.Now().After(deadline) {
			return true, nil, errors.New("the informer never saw the success")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := h.c.sync(context.Background(), "a"); err != nil {
		return true, nil, err
	}
	return handled, n, nil
}

// A drain's deadline is 5 minutes when the group sets no
// nodeDrainTimeoutSecond (the controller's default options), and the
// group's own nodeDrainTimeoutSecond wins when it sets one.
func TestDrainDeadlineDefaultsToFiveMinutesUnlessTheGroupSetsOne(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seconds *int32
		want    time.Duration
	}{
		{"unset", nil, 5 * time.Minute},
		{"nodeDrainTimeoutSecond 900", ptr.To[int32](900), 15 * time.Minute},
		{"nodeDrainTimeoutSecond 60", ptr.To[int32](60), time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{deckhousev1.NodeGroupLabel: "w"}}}
			nm := nmfake.NewClientset(&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{deckhousev1.NodeGroupLabel: "w"}}},
				&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w"},
					Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, NodeDrainTimeoutSecond: tc.seconds}})
			d := manager.NewDepsForClients(kubefake.NewClientset(node), nm, manager.NewOptions(), clock.RealClock{}, prometheus.NewRegistry())
			c := New(d, NewOptions())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d.Informers.Cluster.Start(ctx.Done())
			d.Informers.NodeManager.Start(ctx.Done())
			if !manager.HasSynced(ctx, Name, c.synced...) {
				t.Fatal("informers did not sync")
			}
			got, policy := c.timeout(node)
			if got != tc.want {
				t.Errorf("drain deadline = %v, want %v", got, tc.want)
			}
			if policy != deckhousev1.DrainTimeoutDelete {
				t.Errorf("policy at the deadline = %q, want Delete", policy)
			}
		})
	}
}
