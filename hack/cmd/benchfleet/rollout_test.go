package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// TestCountRolloutSaysWhatHoldsAStalledRollout is the state both 5,000-node
// runs stopped in: the first batch applied the update while not Ready,
// so it keeps its approvals and the rest waits.
func TestCountRolloutSaysWhatHoldsAStalledRollout(t *testing.T) {
	t.Parallel()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	add := func(name string, ready corev1.ConditionStatus, sum string, annotations ...string) {
		n := fleetNodeWithReady(name, ready)
		n.Annotations = map[string]string{}
		if sum != "" {
			n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] = sum
		}
		for _, a := range annotations {
			n.Annotations[a] = ""
		}
		if err := store.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	add("done", corev1.ConditionTrue, "new")
	add("held-1", corev1.ConditionUnknown, "new", deckhousev1.ApprovedAnnotation)
	add("held-2", corev1.ConditionUnknown, "new", deckhousev1.ApprovedAnnotation)
	add("applying", corev1.ConditionTrue, "", deckhousev1.ApprovedAnnotation)
	add("reported", corev1.ConditionTrue, "new", deckhousev1.ApprovedAnnotation)
	add("waiting-1", corev1.ConditionTrue, "", deckhousev1.WaitingForApprovalAnnotation)
	add("waiting-2", corev1.ConditionUnknown, "", deckhousev1.WaitingForApprovalAnnotation)
	add("old", corev1.ConditionTrue, "old")

	c := countRollout(store, "new", 5)
	want := rolloutCounts{nodes: 8, notReady: 3, done: 1, approved: 4, appliedNotReady: 2, appliedReady: 1, waiting: 2, limit: 5}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if why := c.why(); !strings.Contains(why, "2 approved nodes applied the update but are not Ready") {
		t.Errorf("why: %q; want the approved nodes that applied it and are not Ready named first", why)
	}
	healthy := rolloutCounts{nodes: 8, done: 3, approved: 2, waiting: 3, limit: 5}
	if why := healthy.why(); !strings.Contains(why, "only 2 of the 5 update slots are taken while 3 nodes wait") {
		t.Errorf("why: %q; want the free slots named when no node is NotReady", why)
	}
	if n := countApplied(store, "new"); n != 4 {
		t.Errorf("applied %d, want 4", n)
	}
}

// TestAgentAsksAgainAfterAFailedWrite: a write a loaded kube-apiserver
// fails is followed by no event of the node, so the agent must look again
// by itself, or the node never asks for its update.
func TestAgentAsksAgainAfterAFailedWrite(t *testing.T) {
	t.Parallel()
	n := fleetNodeWithReady("node-00000", corev1.ConditionTrue)
	n.Annotations = map[string]string{deckhousev1.ConfigurationChecksumAnnotation: "old"}
	kube := fake.NewClientset(n)
	// The first two writes fail: the node's Add event and setTarget may
	// both have it look, and both looks must fail.
	var failed atomic.Int32
	kube.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed.Add(1) <= 2 {
			return true, nil, apierrors.NewServiceUnavailable("the server is overloaded")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _, err := runAgents(ctx, kube, rolloutGroup, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a.setTarget("new", []string{n.Name})
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err == nil && nodes.Has(got, deckhousev1.WaitingForApprovalAnnotation), nil
	}); err != nil {
		t.Fatalf("the node did not ask for approval after its first write failed (failed: %v): %v", failed.Load(), err)
	}
}

// The slot clock counts free slots while nodes have the update ahead, split
// at the first approval, and not the slots nobody needs at the end.
func TestSlotClockCountsFreeSlotsWhileNodesWait(t *testing.T) {
	start := time.Unix(0, 0)
	s := newSlotClock(start)
	at := func(sec float64) time.Time { return start.Add(time.Duration(sec * float64(time.Second))) }
	// 2 s with no slot taken: 4 slots free for 10 nodes (8 slot-seconds).
	s.observe(at(0), rolloutCounts{nodes: 10, waiting: 10, limit: 4})
	s.observe(at(1), rolloutCounts{nodes: 10, waiting: 10, limit: 4})
	// The first approvals: 3 of 4 slots taken for 1 s (1 slot-second).
	s.observe(at(2), rolloutCounts{nodes: 10, approved: 3, waiting: 7, limit: 4})
	// 1 s with 2 of the 4 approved done and Ready (2 slot-seconds held).
	s.observe(at(3), rolloutCounts{nodes: 10, done: 3, approved: 4, appliedReady: 2, waiting: 3, limit: 4})
	// The end: 2 nodes left, 2 slots nobody needs.
	s.observe(at(4), rolloutCounts{nodes: 10, done: 8, approved: 2, limit: 4})
	s.observe(at(5), rolloutCounts{nodes: 10, done: 10, limit: 4})
	if s.firstApproval != 2*time.Second {
		t.Errorf("first approval at %s, want 2s", s.firstApproval)
	}
	if atStart, later, releasing := s.lost(4); atStart != 2*time.Second || later != 250*time.Millisecond || releasing != 500*time.Millisecond {
		t.Errorf("lost %s at the start, %s later and %s releasing, want 2s, 250ms and 500ms", atStart, later, releasing)
	}
}

// A node starts its update the moment it sees its approval, as its own
// bashible does, even while every write slot of the agents is taken (by the
// group's requests for approval, at the start of a rollout): starting needs
// no write, so it waits for none.
func TestAnApprovedNodeStartsWhileEveryWriteSlotIsTaken(t *testing.T) {
	t.Parallel()
	approved := fleetNodeWithReady("node-00000", corev1.ConditionTrue)
	approved.Annotations = map[string]string{deckhousev1.ApprovedAnnotation: ""}
	asking := fleetNodeWithReady("node-00001", corev1.ConditionTrue)
	kube := fake.NewClientset(approved, asking)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _, err := runAgents(ctx, kube, rolloutGroup, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for range agentWrites {
		a.writes <- struct{}{}
	}
	a.setTarget("new", []string{asking.Name, approved.Name})
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		_, started := a.applyingAt[approved.Name]
		return started, nil
	}); err != nil {
		t.Fatalf("%s did not start its update while the write slots were taken: %v", approved.Name, err)
	}
	for range agentWrites {
		<-a.writes
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := kube.CoreV1().Nodes().Get(ctx, asking.Name, metav1.GetOptions{})
		return err == nil && nodes.Has(got, deckhousev1.WaitingForApprovalAnnotation), nil
	}); err != nil {
		t.Fatalf("%s did not ask for approval once a write slot was free: %v", asking.Name, err)
	}
}
