package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// leaseErrors are the ways a Lease read keeps failing while the API
// answers the Node GET: an RBAC drift (403), throttling (429), a broken
// server (500).
var leaseErrors = map[string]error{
	"403": apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", nil),
	"429": apierrors.NewTooManyRequests("slow down", 1),
	"500": apierrors.NewInternalError(errors.New("etcdserver: request timed out")),
}

// failLeaseReads makes every GET of a Lease fail with err while *on.
func failLeaseReads(h *harness, err error, on *bool) {
	h.kube.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if *on {
			return true, nil, err
		}
		return false, nil, nil
	})
}

// A Lease that the agent cannot read proves nothing about the kubelet,
// while the fencing controller, which can read it, frees the node's pods
// once the kubelet stops renewing it. So a Lease unread for longer than
// LeaseStaleAfter counts as stale: the agent stops feeding (and stays
// armed, so the watchdog resets the node); within the limit it feeds on,
// and once the Lease reads again it feeds again. Before the fix an
// unreadable Lease counted as fresh forever.
func TestALeaseUnreadForLongerThanTheLimitCountsAsStale(t *testing.T) {
	for code, readErr := range leaseErrors {
		t.Run(code, func(t *testing.T) {
			h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
			clk := h.a.clock.(*clocktesting.FakeClock)
			leases := h.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
			lease := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: corev1.NamespaceNodeLease},
				Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: clk.Now()}},
			}
			if _, err := leases.Create(h.ctx, lease, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			failing := false
			failLeaseReads(h, readErr, &failing)
			h.a.Tick(h.ctx)
			h.a.Tick(h.ctx)
			if got := h.written(); got != "11" {
				t.Fatalf("device got %q: with a fresh Lease the agent must arm and feed", got)
			}

			failing = true
			clk.Step(10 * time.Second)
			h.a.Tick(h.ctx)
			if got := h.written(); got != "111" {
				t.Fatalf("device got %q: the Lease unread for 10 s, within the 20 s limit, the agent must feed", got)
			}
			clk.Step(15 * time.Second)
			h.a.Tick(h.ctx)
			if got := h.written(); got != "111" {
				t.Fatalf("device got %q: the Lease unread for 25 s (%s), longer than the 20 s limit, the agent must stop feeding", got, code)
			}
			if !h.a.dev.Armed() {
				t.Fatal("the agent disarmed; it must stay armed so the watchdog resets the node")
			}
			if _, msg := h.a.Ready(); !strings.Contains(msg, "starve: the API answers, but the node's Lease has not been read for 25s") {
				t.Errorf("readiness does not say why it starves: %s", msg)
			}

			failing = false
			lease.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now()}
			if _, err := leases.Update(h.ctx, lease, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			h.a.Tick(h.ctx)
			if got := h.written(); got != "1111" {
				t.Fatalf("device got %q: with the Lease readable and fresh again the agent must feed", got)
			}
		})
	}
}

// An agent that has never read its Lease never arms: it would promise
// nothing about a kubelet it cannot see.
func TestAnAgentThatNeverReadItsLeaseDoesNotArm(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	failing := true
	failLeaseReads(h, leaseErrors["403"], &failing)
	h.a.Tick(h.ctx)
	if h.a.dev.Armed() || h.labelled() {
		t.Fatal("the agent armed though it could never read its node's Lease")
	}
	if _, msg := h.a.Ready(); !strings.Contains(msg, "the node's Lease cannot be read") {
		t.Errorf("readiness does not say why it waits: %s", msg)
	}
	failing = false
	h.a.Tick(h.ctx)
	if !h.a.dev.Armed() || !h.labelled() {
		t.Fatal("the agent did not arm once its Lease could be read")
	}
}

// A Node GET the API refuses (403) is an answer, but then the Lease is not
// read either: it goes unread like any other.
func TestARefusedNodeReadLeavesTheLeaseUnread(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	clk := h.a.clock.(*clocktesting.FakeClock)
	h.a.Tick(h.ctx)
	h.a.Tick(h.ctx)
	if got := h.written(); got != "11" {
		t.Fatalf("device got %q: the agent must arm and feed", got)
	}
	refused := false
	h.kube.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", nil)
		}
		return false, nil, nil
	})
	refused = true
	clk.Step(25 * time.Second)
	h.a.Tick(h.ctx)
	if got := h.written(); got != "11" {
		t.Fatalf("device got %q: the API refusing the Node for 25 s, nothing was read of the Lease, the agent must stop feeding", got)
	}
}
