package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-manager/node-manager/agents/fencing-agent/watchdog"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// fakeGossip is a group membership the test sets.
type fakeGossip struct {
	mu     sync.Mutex
	joined bool
	alive  []string
	// withoutAPI are the alive peers that report no API; reached is what
	// this agent published.
	withoutAPI []string
	reached    bool
}

func (g *fakeGossip) Join([]string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.joined = true
	return len(g.alive)
}
func (g *fakeGossip) Joined() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.joined }
func (g *fakeGossip) Alive() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string{}, g.alive...)
}
func (g *fakeGossip) AliveWithoutAPI() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, n := range g.withoutAPI {
		if slices.Contains(g.alive, n) {
			out = append(out, n)
		}
	}
	return out
}
func (g *fakeGossip) SetAPIReached(r bool)       { g.mu.Lock(); defer g.mu.Unlock(); g.reached = r }
func (g *fakeGossip) Leave(time.Duration)        {}
func (g *fakeGossip) KeyError() error            { return nil }
func (g *fakeGossip) Keyring() string            { return "0123456789abcdef" }
func (g *fakeGossip) SetGroup(map[string]string) {}
func (g *fakeGossip) Rejected(string) uint64     { return 0 }

// cutOff says which alive peers report that they cannot reach the API.
func (g *fakeGossip) cutOff(names ...string) { g.mu.Lock(); defer g.mu.Unlock(); g.withoutAPI = names }
func (g *fakeGossip) see(names ...string)    { g.mu.Lock(); defer g.mu.Unlock(); g.alive = names }

// harness is an agent on node n1 of group workers (n1, n2, n3), with a
// regular file as its watchdog and an API the test can cut.
type harness struct {
	t      *testing.T
	a      *Agent
	kube   *fake.Clientset
	gossip *fakeGossip
	dev    string
	apiCut atomic.Bool
	// patchRefused makes every Node patch fail with 403.
	patchRefused atomic.Bool
	ctx          context.Context
}

func newHarness(t *testing.T, mode string, annotations map[string]string) *harness {
	t.Helper()
	return newHarnessWith(t, mode, annotations)
}

// newHarnessWith is newHarness with more Nodes in the cluster.
func newHarnessWith(t *testing.T, mode string, annotations map[string]string, more ...*corev1.Node) *harness {
	t.Helper()
	var objs []runtime.Object
	for _, n := range more {
		objs = append(objs, n)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{deckhousev1.NodeGroupLabel: "workers", deckhousev1.NodeGroupRestrictedLabel: "workers"}}}
		if n == "n1" {
			node.Annotations = annotations
		} else {
			// The peers' agents are armed: they count in the quorum.
			node.Labels[deckhousev1.FencingEnabledLabel] = ""
		}
		objs = append(objs, node)
	}
	h := &harness{t: t, kube: fake.NewClientset(objs...), gossip: &fakeGossip{alive: []string{"n1", "n2", "n3"}}}
	h.dev = filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(h.dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	h.kube.PrependReactor("*", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if h.apiCut.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	h.kube.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if h.patchRefused.Load() {
			return true, nil, errors.New("nodes \"n1\" is forbidden")
		}
		return false, nil, nil
	})
	cfg := Config{NodeName: "n1", Group: "workers", Mode: mode, FeedInterval: 5 * time.Second, APITimeout: time.Second, RejoinInterval: 10 * time.Second, LeaseStaleAfter: 20 * time.Second}
	h.a = New(cfg, h.kube, NewDevice(mode, h.dev), h.gossip, nil, clocktesting.NewFakeClock(time.Now()))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.ctx = ctx
	h.a.own.Start(ctx.Done())
	h.a.group.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), h.a.synced...) {
		t.Fatal("caches did not sync")
	}
	h.gossip.Join(nil)
	return h
}

func (h *harness) written() string {
	h.t.Helper()
	data, err := os.ReadFile(h.dev)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(data)
}

func (h *harness) node() *corev1.Node {
	h.t.Helper()
	n, err := h.kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) labelled() bool {
	_, ok := h.node().Labels[deckhousev1.FencingEnabledLabel]
	return ok
}

// annotate changes n1's annotations and waits until the agent's cache has it.
func (h *harness) annotate(annotations map[string]string) {
	h.t.Helper()
	n := h.node()
	n.Annotations = annotations
	if _, err := h.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func TestArmsLabelsAndFeedsOncePerTick(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	h.a.Tick(h.ctx)
	if !h.a.dev.Armed() {
		t.Fatalf("not armed after the first tick: %+v", h.a.Status())
	}
	n := h.node()
	if _, ok := n.Labels[deckhousev1.FencingEnabledLabel]; !ok || n.Labels[deckhousev1.FencingModeLabel] != deckhousev1.FencingModeWatchdog {
		t.Fatalf("Node labels after arming: %v", n.Labels)
	}
	for range 4 {
		h.a.Tick(h.ctx)
	}
	if got := h.written(); got != "11111" {
		t.Fatalf("after arming and four more ticks the device got %q, want one feed per tick", got)
	}
	if ok, msg := h.a.Ready(); !ok {
		t.Fatalf("not ready while armed: %s", msg)
	}
}

func TestNeverArmsBeforeJoinedAndSynced(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	h.gossip.mu.Lock()
	h.gossip.joined = false
	h.gossip.mu.Unlock()
	h.a.Tick(h.ctx)
	if h.a.dev.Armed() || h.labelled() {
		t.Fatal("armed before joining the gossip")
	}
	if ok, _ := h.a.Ready(); ok {
		t.Fatal("ready before joining the gossip")
	}
}

func TestKeepsFeedingWithoutTheAPIWhileAMajorityHasLostItToo(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	h.a.Tick(h.ctx)
	h.apiCut.Store(true)
	h.gossip.see("n1", "n2") // 2 of 3
	h.gossip.cutOff("n2")    // and n2 has lost the API too
	h.a.Tick(h.ctx)
	h.a.Tick(h.ctx)
	if got := h.written(); got != "111" {
		t.Fatalf("device got %q: with the API down for a majority seen, the agent must keep feeding", got)
	}
	if h.gossip.reached {
		t.Fatal("the agent did not publish that it lost the API")
	}
	// n2 reaches the API again, this node does not: it is the one cut
	// off, and its Lease alone goes stale; it must stop feeding.
	h.gossip.cutOff()
	h.a.Tick(h.ctx)
	if got := h.written(); got != "111" {
		t.Fatalf("device got %q: its peers reach the API and it does not, so the agent must stop feeding", got)
	}
	h.gossip.cutOff("n2")
	h.a.Tick(h.ctx)
	if got := h.written(); got != "1111" {
		t.Fatalf("device got %q: the majority without the API again, the agent must feed", got)
	}
	h.gossip.see("n1") // 1 of 3: cut off
	h.a.Tick(h.ctx)
	h.a.Tick(h.ctx)
	if got := h.written(); got != "1111" {
		t.Fatalf("device got %q: cut off from the API and the majority, the agent must stop feeding", got)
	}
	if !h.a.dev.Armed() {
		t.Fatal("a cut-off agent disarmed; it must stay armed so the watchdog fires")
	}
	h.apiCut.Store(false)
	h.a.Tick(h.ctx)
	if !h.gossip.reached {
		t.Fatal("the agent did not publish that it reaches the API again")
	}
	if got := h.written(); got != "11111" {
		t.Fatalf("device got %q: with the API back the agent must feed again", got)
	}
}

func TestAGroupTooSmallForAQuorumFeedsOnTheAPIAlone(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	for _, n := range []string{"n2", "n3"} {
		if err := h.kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { l, _ := h.a.grpNodes.List(labels.Everything()); return len(l) == 1 })
	h.a.Tick(h.ctx)
	if _, msg := h.a.Ready(); !strings.Contains(msg, "too few for a quorum") {
		t.Fatalf("readiness does not say the group is too small: %s", msg)
	}
	h.apiCut.Store(true)
	h.a.Tick(h.ctx)
	if got := h.written(); got != "1" {
		t.Fatalf("device got %q: a group of one without the API must stop feeding", got)
	}
}

func TestMaintenanceRemovesTheLabelThenDisarmsAndRearmsAfter(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	h.a.Tick(h.ctx)
	for _, a := range MaintenanceAnnotations {
		h.annotate(map[string]string{a: ""})
		h.a.Tick(h.ctx)
		if h.a.dev.Armed() || h.labelled() {
			t.Fatalf("%s: still armed or labelled", a)
		}
		if got := h.written(); got[len(got)-1] != 'V' {
			t.Fatalf("%s: device got %q, want it to end with the magic close", a, got)
		}
		h.a.Tick(h.ctx)
		if h.a.dev.Armed() {
			t.Fatalf("%s: armed while in maintenance", a)
		}
		if ok, msg := h.a.Ready(); !ok {
			t.Fatalf("%s: not ready while deliberately disarmed: %s", a, msg)
		}
		h.annotate(nil)
		h.a.Tick(h.ctx)
		if !h.a.dev.Armed() || !h.labelled() {
			t.Fatalf("%s: not re-armed after maintenance", a)
		}
	}
}

func TestNeverArmsWhenStartedInMaintenance(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, map[string]string{deckhousev1.FencingDisableAnnotation: ""})
	h.a.Tick(h.ctx)
	h.a.Tick(h.ctx)
	if h.a.dev.Armed() || h.written() != "" {
		t.Fatalf("armed on a node in maintenance; device got %q", h.written())
	}
}

func TestDisarmsWhenTheLabelCannotBeWritten(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	h.patchRefused.Store(true)
	h.a.Tick(h.ctx)
	if h.a.dev.Armed() {
		t.Fatal("armed without the label")
	}
	if got := h.written(); got != "V" {
		t.Fatalf("device got %q, want the magic close right after the failed label", got)
	}
}

func TestNotifyModeNeverOpensTheDevice(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeNotify, nil)
	if err := os.Remove(h.dev); err != nil {
		t.Fatal(err)
	}
	h.a.Tick(h.ctx)
	h.a.Tick(h.ctx)
	if n := h.node(); n.Labels[deckhousev1.FencingModeLabel] != deckhousev1.FencingModeNotify {
		t.Fatalf("Node labels: %v, want fencing-mode=Notify", n.Labels)
	}
	if !h.labelled() {
		t.Fatal("a Notify agent must label its Node: the controller acts only on labelled nodes")
	}
	if _, err := os.Stat(h.dev); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the device path was touched in Notify mode: %v", err)
	}
	var _ Device = watchdog.New(h.dev) // Watchdog mode's device
}

func TestStoppingRemovesTheLabelThenDisarms(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	h.a.Tick(h.ctx)
	h.a.shutdown()
	if h.labelled() || h.a.dev.Armed() {
		t.Fatal("still labelled or armed after stopping")
	}
	if got := h.written(); got != "1V" {
		t.Fatalf("device got %q, want a feed then the magic close", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunFeedsOncePerFeedInterval(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	clk := h.a.clock.(*clocktesting.FakeClock)
	done := make(chan struct{})
	go func() { _ = h.a.Run(h.ctx); close(done) }()
	waitFor(t, func() bool { return h.written() == "1" }) // armed and fed at once
	for i := 2; i <= 4; i++ {
		waitFor(t, clk.HasWaiters) // the loop waits on its ticker
		clk.Step(h.a.cfg.FeedInterval / 2)
		clk.Step(h.a.cfg.FeedInterval / 2)
		want := strings.Repeat("1", i)
		waitFor(t, func() bool { return len(h.written()) >= i })
		if got := h.written(); got != want {
			t.Fatalf("after %d feed intervals the device got %q, want %q: one feed per interval", i-1, got, want)
		}
	}
}

func TestTheLoopIsUnhealthyWhenItStopsTurning(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	clk := h.a.clock.(*clocktesting.FakeClock)
	h.a.Tick(h.ctx)
	if err := h.a.Healthy(); err != nil {
		t.Fatalf("unhealthy right after a turn: %v", err)
	}
	clk.Step(3*h.a.cfg.FeedInterval + h.a.cfg.APITimeout + time.Second)
	if err := h.a.Healthy(); err == nil {
		t.Fatal("healthy although the loop has not turned for more than three feed intervals")
	}
}

func TestALabelLeftByADeadAgentIsRemovedWhileInMaintenance(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, map[string]string{deckhousev1.FencingDisableAnnotation: ""})
	n := h.node()
	n.Labels[deckhousev1.FencingEnabledLabel] = ""
	if _, err := h.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.a.Tick(h.ctx)
	if h.labelled() {
		t.Fatal("a disarmed agent left the fencing label on its Node: the controller would trust a promise nobody keeps")
	}
}

// A node whose kubelet stopped renewing its Lease is fenced like one cut
// off, though its agent still reaches the API, and its containers may
// still run: the agent stops feeding once the Lease is older than
// LeaseStaleAfter, and feeds again once the kubelet renews it.
func TestAStaleLeaseStopsTheFeedingThoughTheAPIAnswers(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	now := h.a.clock.Now()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: corev1.NamespaceNodeLease},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-5 * time.Second)}},
	}
	leases := h.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if _, err := leases.Create(h.ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.a.Tick(h.ctx)
	h.a.Tick(h.ctx)
	if got := h.written(); got != "11" {
		t.Fatalf("device got %q: with a fresh Lease the agent must arm and feed", got)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-25 * time.Second)}
	if _, err := leases.Update(h.ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.a.Tick(h.ctx)
	if got := h.written(); got != "11" {
		t.Fatalf("device got %q: with the Lease 25 s old the agent must stop feeding", got)
	}
	if _, msg := h.a.Ready(); !strings.Contains(msg, "Lease was last renewed 25s ago") {
		t.Errorf("readiness does not say why it starves: %s", msg)
	}
	if !h.a.dev.Armed() {
		t.Fatal("the agent disarmed; it must stay armed so the watchdog resets the node")
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if _, err := leases.Update(h.ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.a.Tick(h.ctx)
	if got := h.written(); got != "111" {
		t.Fatalf("device got %q: with the Lease renewed the agent must feed again", got)
	}
}

// The expected membership is the group's armed Nodes (and this node), the
// ones the fencing controller counts too: a peer disarmed for maintenance
// no longer makes a majority possible, so with one of three disarmed the
// group is too small for a quorum and feeds on the API alone.
func TestOnlyArmedPeersCountInTheQuorum(t *testing.T) {
	h := newHarness(t, deckhousev1.FencingModeWatchdog, nil)
	h.a.Tick(h.ctx)
	if got := len(h.a.expectedMembers()); got != 3 {
		t.Fatalf("expected membership %d, want 3 (two armed peers and this node)", got)
	}
	n2, err := h.kube.CoreV1().Nodes().Get(h.ctx, "n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n2.Labels, deckhousev1.FencingEnabledLabel)
	if _, err := h.kube.CoreV1().Nodes().Update(h.ctx, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(h.a.expectedMembers()) == 2 })
	h.apiCut.Store(true)
	h.gossip.cutOff("n2", "n3")
	h.a.Tick(h.ctx)
	if got := h.written(); got != "1" {
		t.Fatalf("device got %q: a group of two armed members has no quorum, and without the API the agent must stop feeding", got)
	}
}

// TestANodeRelabelledIntoTheGroupIsNoMember: the group's members are the
// Nodes whose restricted group label (set by node-manager-controller from
// their Instances; no kubelet can write it) names the group. A node of
// another group whose kubelet labelled it node.deckhouse.io/group=workers,
// armed and with an address, is not admitted to the gossip, contacted,
// nor counted in the quorum; a member that labelled itself out still is.
func TestANodeRelabelledIntoTheGroupIsNoMember(t *testing.T) {
	rogue := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rogue", Labels: map[string]string{
		deckhousev1.NodeGroupLabel: "workers", deckhousev1.NodeGroupRestrictedLabel: "others", deckhousev1.FencingEnabledLabel: ""}}}
	rogue.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.66"}}
	// n4 is of workers (its Instance's group) but labelled itself others.
	n4 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n4", Labels: map[string]string{
		deckhousev1.NodeGroupLabel: "others", deckhousev1.NodeGroupRestrictedLabel: "workers", deckhousev1.FencingEnabledLabel: ""}}}
	h := newHarnessWith(t, deckhousev1.FencingModeWatchdog, nil, rogue, n4)
	h.a.Tick(h.ctx)
	members := h.a.expectedMembers()
	if members["rogue"] || !members["n4"] || len(members) != 4 {
		t.Errorf("expected membership %v: want n1..n4 (n4 labelled itself out, it is still workers'), never rogue (it labelled itself in)", members)
	}
	if addrs := h.a.groupAddresses(); len(addrs) != 4 || func() bool { _, ok := addrs["rogue"]; return ok }() {
		t.Errorf("the gossip admits %v: want n1..n4, never rogue", addrs)
	}
	for _, p := range h.a.peers() {
		if strings.HasPrefix(p, "192.0.2.66:") {
			t.Errorf("the agent contacts rogue's address %s", p)
		}
	}
}
