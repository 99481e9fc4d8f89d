// Package nodetemplate keeps every node of a group carrying its group's
// nodeTemplate (labels, annotations, taints) and the labels node-manager
// derives from the group (type and role), by a three-way merge of the
// node's actual metadata, the desired template and the copy of what was
// applied last, stored on the node itself. Keys node-manager never applied
// are never touched: a first apply adds and overwrites, it never removes
// (Deckhouse once wiped the cloud provider's uninitialized taint that way).
//
// A node's group is the one its Instance pins (node.deckhouse.io/group on
// the Instance, written by node-manager-controller from the join it
// witnessed), never the Node's own label: the kubelet may rewrite its
// Node's labels, and a node that relabelled itself into another group
// would otherwise receive that group's labels and taints (control-plane
// roles, dedicated-node labels) and the workloads they attract. A node
// without an Instance gets no template until node-manager admits it.
package nodetemplate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	listers "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	instancelisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/internal/eventnote"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "node-template"

// Event reasons.
const (
	// ReasonSkippedKeys: a NodeGroup's template has entries in node-manager's
	// own namespaces or that the Node API would reject; they are skipped.
	ReasonSkippedKeys = "NodeTemplateKeysSkipped"
	// ReasonBadLastApplied: a node's last-applied annotation was unreadable;
	// nothing was removed and the annotation was rewritten.
	ReasonBadLastApplied = "NodeTemplateLastAppliedInvalid"
)

// maxNote bounds an event's note below the Events API's 1 KiB limit.
const maxNote = 1000

// UnmanagedNodesMetric is 1 for every node without a group label.
const UnmanagedNodesMetric = "d8_unmanaged_nodes_on_cluster"

// Controller applies node templates. Its key is a node name.
type Controller struct {
	d         *manager.Deps
	groups    listers.NodeGroupLister
	instances instancelisters.InstanceLister
	synced    []cache.InformerSynced
	queue     *loop.Loop
	unmanaged *prometheus.GaugeVec

	mu sync.Mutex
	// unknownLogged holds the missing groups already logged, so a node of
	// a group that does not exist is reported once, not on every event.
	unknownLogged map[string]bool
	// warned holds the generation of each group whose skipped entries were
	// already reported.
	warned map[string]int64
}

// New builds the controller and registers its informer handlers and its
// metric; call it before the informer factories start. A node queues its
// name when its metadata changes and when its Instance comes, goes or is
// relabelled; a group queues its nodes when its type or template changes.
func New(d *manager.Deps) *Controller {
	nodeInformer := d.Informers.Cluster.Core().V1().Nodes().Informer()
	groupInformer := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	instanceInformer := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances()
	c := &Controller{
		d:             d,
		groups:        groupInformer.Lister(),
		instances:     instanceInformer.Lister(),
		synced:        []cache.InformerSynced{nodeInformer.HasSynced, groupInformer.Informer().HasSynced, instanceInformer.Informer().HasSynced},
		unknownLogged: map[string]bool{},
		warned:        map[string]int64{},
		unmanaged: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: UnmanagedNodesMetric,
			Help: "1 for every Node without the " + deckhousev1.NodeGroupLabel + " label: node-manager does not manage it.",
		}, []string{"node"}),
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	d.Registry.MustRegister(c.unmanaged, newTaintMissing(c.groups))

	_, _ = nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueNode,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			// Status-only updates (heartbeats) cannot change the outcome;
			// a resync (same version) is let through to heal drift.
			if ok1 && ok2 && o.ResourceVersion != n.ResourceVersion && !metadataChanged(o, n) {
				return
			}
			c.enqueueNode(newObj)
		},
		DeleteFunc: c.enqueueNode,
	})
	// An Instance is named after its node.
	_, _ = instanceInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueInstance,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*deckhousev1alpha1.Instance)
			n, ok2 := newObj.(*deckhousev1alpha1.Instance)
			if ok1 && ok2 && o.Labels[deckhousev1.NodeGroupLabel] == n.Labels[deckhousev1.NodeGroupLabel] {
				return
			}
			c.enqueueInstance(newObj)
		},
		DeleteFunc: c.enqueueInstance,
	})
	_, _ = groupInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ng, ok := obj.(*deckhousev1.NodeGroup); ok {
				c.mu.Lock()
				delete(c.unknownLogged, ng.Name)
				c.mu.Unlock()
				c.warnSkipped(ng)
				c.enqueueGroup(ng.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*deckhousev1.NodeGroup)
			n, ok2 := newObj.(*deckhousev1.NodeGroup)
			if !ok1 || !ok2 {
				return
			}
			c.warnSkipped(n)
			// Status updates are frequent and change nothing here.
			if o.Spec.NodeType != n.Spec.NodeType || !equality.Semantic.DeepEqual(o.Spec.NodeTemplate, n.Spec.NodeTemplate) {
				c.enqueueGroup(n.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if ng, ok := obj.(*deckhousev1.NodeGroup); ok {
				c.mu.Lock()
				delete(c.warned, ng.Name)
				c.mu.Unlock()
			}
		},
	})
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for the Node and NodeGroup
// caches, then works the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Run(ctx, workers)
}

func metadataChanged(o, n *corev1.Node) bool {
	return !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
		!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints)
}

func (c *Controller) enqueueNode(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.queue.Add(t.Key)
		return
	}
	if n, ok := obj.(*corev1.Node); ok {
		c.queue.Add(n.Name)
	}
}

func (c *Controller) enqueueInstance(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.queue.Add(t.Key)
		return
	}
	if inst, ok := obj.(*deckhousev1alpha1.Instance); ok {
		c.queue.Add(inst.Name)
	}
}

// enqueueGroup queues the nodes the group's Instances pin to it.
func (c *Controller) enqueueGroup(group string) {
	insts, err := c.instances.List(labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}))
	if err != nil {
		klog.ErrorS(err, "Listing the Instances of a group", "controller", Name, "nodeGroup", group)
		return
	}
	for _, inst := range insts {
		c.queue.Add(inst.Name)
	}
}

// warnSkipped reports, once per generation, the template entries that are
// not applied.
func (c *Controller) warnSkipped(ng *deckhousev1.NodeGroup) {
	keys := Skipped(ng)
	c.mu.Lock()
	seen, ok := c.warned[ng.Name]
	if len(keys) == 0 || (ok && seen == ng.Generation) {
		c.mu.Unlock()
		return
	}
	c.warned[ng.Name] = ng.Generation
	c.mu.Unlock()
	note := fmt.Sprintf("nodeTemplate entries not applied to nodes (keys in %s, and %s, are node-manager's own): %s",
		strings.Join(reservedPrefixes, ", "), strings.Join(reservedKeys, ", "), strings.Join(keys, ", "))
	// The Events API refuses notes of 1 KiB and more.
	if len(note) > maxNote {
		n := maxNote - 3
		for n > 0 && !utf8.RuneStart(note[n]) {
			n--
		}
		note = note[:n] + "..."
	}
	klog.InfoS("NodeGroup template entries skipped", "controller", Name, "nodeGroup", ng.Name, "entries", keys)
	// A later generation that skips other keys is a new Event, not a count
	// on this one.
	c.d.Recorder.Eventf(ng, nil, corev1.EventTypeWarning, ReasonSkippedKeys, eventnote.Action("ApplyNodeTemplate", note), "%s", note)
}
