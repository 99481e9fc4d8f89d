package nodes

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// writeTTL bounds how long a written Node shadows the informer's copy if
// the informer never delivers that exact version (after a relist, say).
const writeTTL = 30 * time.Second

// Cache is the informer's view of Nodes with read-your-writes: a Node the
// controller patched is served from the patch response until the informer
// has caught up with it. Without it, a second decision made before the
// watch event arrives would see the old Node — and could, for example,
// approve one node more than maxConcurrent allows.
//
// It is also the one place that says which group a node belongs to: the
// group of its Instance (GroupOf, InGroup), the record node-manager wrote
// when it admitted the node. Never the Node's own node.deckhouse.io/group
// label: NodeRestriction lets a kubelet rewrite it, and a node that
// labelled itself master would otherwise be counted in master's status,
// approved in master's batches, and vote in master's fencing quorum.
type Cache struct {
	lister    corelisters.NodeLister
	instances nmlisters.InstanceLister
	clock     clock.PassiveClock

	mu sync.Mutex
	// written holds, per Node, a write of ours the informer has not
	// delivered yet: the newest version written, when, and when the oldest
	// such write was made. It shadows the informer's copy for writeTTL, and
	// stays after that until the informer delivers it, so a watch that
	// stopped delivering is still noticed (Behind).
	written map[string]written
}

type written struct {
	node      *corev1.Node
	at, since time.Time
}

// NewCache wraps a Node lister and the Instance lister that says each
// node's group.
func NewCache(lister corelisters.NodeLister, instances nmlisters.InstanceLister, clk clock.PassiveClock) *Cache {
	return &Cache{lister: lister, instances: instances, clock: clk, written: map[string]written{}}
}

// Wrote records a Node returned by a write, unless the informer already
// holds that version (its event may come before the write's response).
func (c *Cache) Wrote(n *corev1.Node) {
	// Under the lock: the informer's store holds a version before its
	// event reaches Observe, so the write is either seen here or cleared
	// there.
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, err := c.lister.Get(n.Name); err == nil && !olderThan(cur.ResourceVersion, n.ResourceVersion) {
		return
	}
	now := c.clock.Now()
	w, ok := c.written[n.Name]
	if !ok {
		w.since = now
	}
	w.node, w.at = n, now
	c.written[n.Name] = w
}

// Observe is called with every Node the informer delivers; once it
// delivers the version we wrote (or a newer one), the informer is current.
func (c *Cache) Observe(n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.written[n.Name]
	if ok && !olderThan(n.ResourceVersion, w.node.ResourceVersion) {
		delete(c.written, n.Name)
	}
}

// Forget drops a deleted Node.
func (c *Cache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.written, name)
}

// Behind reports whether the informer has still not delivered a write of
// ours made more than d ago: its watch lags or has stopped, and what it
// shows of other writers may be that old too.
func (c *Cache) Behind(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.written {
		if c.clock.Since(w.since) > d {
			return true
		}
	}
	return false
}

// ComparableVersion reports whether a resource version is one the cache
// can order (an etcd revision): with any other, it cannot tell a stale
// copy from a current one.
func ComparableVersion(rv string) bool {
	_, err := strconv.ParseUint(rv, 10, 64)
	return err == nil
}

// olderThan reports whether resource version a is known to be older than b.
// Resource versions are opaque to clients, but every apiserver backed by
// etcd issues increasing integers; anything else is treated as not older.
func olderThan(a, b string) bool {
	ai, err1 := strconv.ParseUint(a, 10, 64)
	bi, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && ai < bi
}

func (c *Cache) fresh(n *corev1.Node) *corev1.Node {
	w, ok := c.written[n.Name]
	if !ok {
		return n
	}
	if !olderThan(n.ResourceVersion, w.node.ResourceVersion) {
		delete(c.written, n.Name)
		return n
	}
	if c.clock.Since(w.at) > writeTTL {
		return n
	}
	return w.node
}

// Get returns the freshest known copy of a Node. Callers must not modify it.
func (c *Cache) Get(name string) (*corev1.Node, error) {
	n, err := c.lister.Get(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fresh(n), nil
}

// List returns the freshest known copies of the Nodes matching selector.
func (c *Cache) List(selector labels.Selector) ([]*corev1.Node, error) {
	ns, err := c.lister.List(selector)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*corev1.Node, 0, len(ns))
	for _, n := range ns {
		if f := c.fresh(n); selector.Matches(labels.Set(f.Labels)) {
			out = append(out, f)
		}
	}
	return out, nil
}

// GroupOf is the group of the node named name: its Instance's group
// label; "" for a node without an Instance, which belongs to no group.
func (c *Cache) GroupOf(name string) string {
	inst, err := c.instances.Get(name)
	if err != nil {
		return ""
	}
	return inst.Labels[deckhousev1.NodeGroupLabel]
}

// InGroup lists the Nodes of one node group: those whose Instance is the
// group's, whatever their own label says, by name.
func (c *Cache) InGroup(group string) ([]*corev1.Node, error) {
	insts, err := c.instances.List(labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}))
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Node, 0, len(insts))
	for _, inst := range insts {
		n, err := c.lister.Get(inst.Name)
		if apierrors.IsNotFound(err) {
			continue // not registered yet, or gone
		}
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	c.mu.Lock()
	for i, n := range out {
		out[i] = c.fresh(n)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Labelled lists the Nodes that carry group's label, members or not: only
// for telling a node without an Instance that its group has appeared, and
// for warning about labels that disagree with Instances.
func (c *Cache) Labelled(group string) ([]*corev1.Node, error) {
	return c.List(labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}))
}

// ByGroup keys a Node's event by its group (GroupOf), for the queues of
// controllers that work per group.
func (c *Cache) ByGroup(obj any) string {
	if n, ok := obj.(*corev1.Node); ok {
		return c.GroupOf(n.Name)
	}
	return ""
}

// CacheHandler keeps a Cache informed of what the informer delivers.
func CacheHandler(c *Cache) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				c.Observe(n)
			}
		},
		UpdateFunc: func(_, obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				c.Observe(n)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				c.Forget(n.Name)
			}
		},
	}
}
