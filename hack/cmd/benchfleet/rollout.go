package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// agents play bashible's side of the update protocol for every node of one
// group in one process, as hack/e2e/framework's Agent does for a few (ask
// for approval while removing the checksum, wait for it, take applyTakes,
// report the checksum), but driven by one informer instead of a poll per
// node, so a thousand of them cost little. Each node looks at itself on
// its own, so a node approved at the start of a rollout starts its update
// at once (a shared pool of workers had it wait behind the whole group's
// requests for approval, up to a second); their writes go agentWrites at a
// time, so the group's requests for approval, all at one moment here,
// reach kube-apiserver as a stream rather than at once.
type agents struct {
	ctx        context.Context
	kube       kubernetes.Interface
	group      string
	applyTakes time.Duration
	lister     func(name string) (*corev1.Node, bool)

	mu         sync.Mutex
	target     string
	applyingAt map[string]time.Time
	// busy: a node whose step runs; again: it changed meanwhile, so it
	// steps once more when this one ends.
	busy, again map[string]bool
	writes      chan struct{}
}

// agentWrites is how many writes the agents make at once.
const agentWrites = 8

// runAgents starts the agents of group; they converge on whatever target
// is set, until ctx ends.
func runAgents(ctx context.Context, kube kubernetes.Interface, group string, applyTakes time.Duration) (*agents, cache.SharedIndexInformer, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = deckhousev1.NodeGroupLabel + "=" + group
	}))
	informer := factory.Core().V1().Nodes().Informer()
	a := &agents{ctx: ctx, kube: kube, group: group, applyTakes: applyTakes, applyingAt: map[string]time.Time{}, busy: map[string]bool{}, again: map[string]bool{},
		writes: make(chan struct{}, agentWrites)}
	a.lister = func(name string) (*corev1.Node, bool) {
		obj, ok, err := informer.GetStore().GetByKey(name)
		if err != nil || !ok {
			return nil, false
		}
		return obj.(*corev1.Node), true
	}
	enqueue := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			a.enqueue(n.Name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }}); err != nil {
		return nil, nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, nil, fmt.Errorf("the Nodes of group %s did not sync", group)
	}
	return a, informer, nil
}

// enqueue has the node look at itself: at once in a goroutine of its own,
// or, while it is already looking, once more right after.
func (a *agents) enqueue(name string) {
	a.mu.Lock()
	if a.busy[name] {
		a.again[name] = true
		a.mu.Unlock()
		return
	}
	a.busy[name] = true
	a.mu.Unlock()
	go func() {
		for a.ctx.Err() == nil {
			a.step(a.ctx, name)
			a.mu.Lock()
			if !a.again[name] {
				delete(a.busy, name)
				a.mu.Unlock()
				return
			}
			delete(a.again, name)
			a.mu.Unlock()
		}
	}()
}

// setTarget tells every node that the served checksum is now sum.
func (a *agents) setTarget(sum string, names []string) {
	a.mu.Lock()
	a.target = sum
	a.mu.Unlock()
	for _, n := range names {
		a.enqueue(n)
	}
}

// step does one thing of the protocol for a node, guarded by its
// resourceVersion (a stale view just fails and waits for the next event).
func (a *agents) step(ctx context.Context, name string) {
	n, ok := a.lister(name)
	if !ok {
		return
	}
	a.mu.Lock()
	target := a.target
	a.mu.Unlock()
	if target == "" {
		return
	}
	has := func(k string) bool { return nodes.Has(n, k) }
	var set map[string]any
	switch {
	case n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == target && !has(deckhousev1.WaitingForApprovalAnnotation):
		return
	case !has(deckhousev1.ApprovedAnnotation) && !has(deckhousev1.WaitingForApprovalAnnotation):
		set = map[string]any{deckhousev1.WaitingForApprovalAnnotation: "", deckhousev1.ConfigurationChecksumAnnotation: nil}
	case !has(deckhousev1.ApprovedAnnotation):
		return
	default:
		a.mu.Lock()
		at, applying := a.applyingAt[name]
		if !applying {
			a.applyingAt[name] = time.Now()
			a.mu.Unlock()
			time.AfterFunc(a.applyTakes, func() { a.enqueue(name) })
			return
		}
		if time.Since(at) < a.applyTakes {
			a.mu.Unlock()
			return
		}
		delete(a.applyingAt, name)
		a.mu.Unlock()
		set = map[string]any{deckhousev1.ConfigurationChecksumAnnotation: target}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": set}})
	select {
	case a.writes <- struct{}{}:
	case <-ctx.Done():
		return
	}
	_, err := a.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	<-a.writes
	if err != nil && ctx.Err() == nil {
		// A conflict (the informer is behind: the node's event is on its
		// way) or a write a loaded kube-apiserver failed, which no event
		// follows: look again shortly, as bashible tries again. A failed
		// checksum report keeps its update applied.
		if set[deckhousev1.ConfigurationChecksumAnnotation] == target {
			a.mu.Lock()
			a.applyingAt[name] = time.Now().Add(-a.applyTakes)
			a.mu.Unlock()
		}
		time.AfterFunc(100*time.Millisecond, func() { a.enqueue(name) })
	}
}

// rolledOut reports whether every node of the informer's store has
// applied sum and carries no update annotation any more.
func rolledOut(store cache.Store, sum string, count int) bool {
	list := store.List()
	if len(list) != count {
		return false
	}
	for _, obj := range list {
		n := obj.(*corev1.Node)
		if n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != sum ||
			nodes.Has(n, deckhousev1.ApprovedAnnotation) || nodes.Has(n, deckhousev1.WaitingForApprovalAnnotation) {
			return false
		}
	}
	return true
}

// rolloutCounts is where the nodes of a rollout stand: what a reader of
// a rollout that did not finish needs to know why.
type rolloutCounts struct {
	nodes, notReady int
	// done applied the target and carry no update annotation.
	done int
	// approved hold an update approval; appliedNotReady of them applied
	// the target but are not Ready, so update approval keeps their slot
	// (it releases a slot only for a Ready node); appliedReady applied it
	// and are Ready, and wait for update approval to release their slot.
	approved, appliedNotReady, appliedReady int
	// waiting ask for an approval.
	waiting int
	// limit is maxConcurrent: the update slots.
	limit int
}

// countRollout is where the nodes of the store stand on the way to sum,
// with limit update slots.
func countRollout(store cache.Store, sum string, limit int) rolloutCounts {
	c := rolloutCounts{limit: limit}
	for _, obj := range store.List() {
		n := obj.(*corev1.Node)
		c.nodes++
		ready := nodes.IsReady(n)
		if !ready {
			c.notReady++
		}
		applied := n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == sum
		switch {
		case nodes.Has(n, deckhousev1.ApprovedAnnotation):
			c.approved++
			switch {
			case applied && !ready:
				c.appliedNotReady++
			case applied:
				c.appliedReady++
			}
		case nodes.Has(n, deckhousev1.WaitingForApprovalAnnotation):
			c.waiting++
		case applied:
			c.done++
		}
	}
	return c
}

func (c rolloutCounts) String() string {
	return fmt.Sprintf("%d of %d nodes done, %d approved (%d of them applied the update but are not Ready), %d waiting for approval; %d not Ready",
		c.done, c.nodes, c.approved, c.appliedNotReady, c.waiting, c.notReady)
}

// why says, for a rollout that stopped in this state, what holds it.
func (c rolloutCounts) why() string {
	switch {
	case c.appliedNotReady > 0:
		return fmt.Sprintf("%d approved nodes applied the update but are not Ready: update approval releases the slot only of a Ready node, "+
			"and approves nobody Ready while the group has nodes that are not", c.appliedNotReady)
	case c.notReady > 0 && c.waiting > 0:
		return fmt.Sprintf("%d nodes of the group are not Ready: update approval approves Ready nodes only while every node of the group is Ready", c.notReady)
	case c.waiting > 0 && c.approved < c.limit:
		return fmt.Sprintf("only %d of the %d update slots are taken while %d nodes wait: the controller approves slower than nodes finish "+
			"(its requests to the API; see its log)", c.approved, c.limit, c.waiting)
	case c.approved > 0:
		return "approved nodes have not reported the update yet (the agents are behind)"
	case c.waiting > 0:
		return "nodes wait for an approval the controller has not given (see node-manager-controller's log)"
	}
	return "every node is done or has not asked yet"
}

// countApplied is how many nodes of the store have applied sum.
func countApplied(store cache.Store, sum string) int {
	n := 0
	for _, obj := range store.List() {
		if obj.(*corev1.Node).Annotations[deckhousev1.ConfigurationChecksumAnnotation] == sum {
			n++
		}
	}
	return n
}

// slotClock adds up, over a rollout, the update slots that stood free while
// nodes still had the update ahead of them: the rollout's time over the
// ideal, told apart into the start (until the first approval) and the rest
// (between batches).
type slotClock struct {
	start, last time.Time
	// prev is what the last observation saw, which held until the next.
	prev rolloutCounts
	seen bool
	// firstApproval is when a node was first seen approved or done.
	firstApproval time.Duration
	// idleStart and idleLater are free slot-seconds before and after it.
	idleStart, idleLater float64
	// releasing is slot-seconds held by nodes that had applied the update
	// and were Ready: what releasing a slot costs.
	releasing float64
}

func newSlotClock(start time.Time) *slotClock { return &slotClock{start: start} }

// observe takes where the rollout stands at now.
func (s *slotClock) observe(now time.Time, c rolloutCounts) {
	if s.seen {
		p := s.prev
		s.releasing += float64(p.appliedReady) * now.Sub(s.last).Seconds()
		if free := min(p.limit-p.approved, p.nodes-p.done-p.approved); free > 0 {
			idle := float64(free) * now.Sub(s.last).Seconds()
			if s.firstApproval == 0 {
				s.idleStart += idle
			} else {
				s.idleLater += idle
			}
		}
	}
	if s.firstApproval == 0 && c.approved+c.done > 0 {
		s.firstApproval = now.Sub(s.start)
	}
	s.prev, s.seen, s.last = c, true, now
}

// lost is the time the free slots cost, at the start and later, and the
// slots held by nodes already done: their slot-seconds over the slots.
func (s *slotClock) lost(limit int) (start, later, releasing time.Duration) {
	per := func(slotSeconds float64) time.Duration {
		return time.Duration(slotSeconds / float64(limit) * float64(time.Second))
	}
	return per(s.idleStart), per(s.idleLater), per(s.releasing)
}
