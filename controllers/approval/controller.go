// Package approval is the cluster side of the update protocol: it approves
// updates one slot at a time, approves disruptions (draining first where
// that is wanted), and clears the protocol's annotations once a node has
// applied its group's configuration. The decisions are a pure function of
// the group, its checksum, its nodes and the time (Plan), so they are
// tested exhaustively without a cluster; the controller only applies them.
//
// maxConcurrent bounds two things: how many nodes of a group hold an update
// approval (approved), and how many are disrupted (see Disrupted: drained
// or being drained by node-manager, disruption-approved, or marked
// rolling-update). A disruption is granted only to a node that holds an
// update approval, and only while fewer than maxConcurrent nodes of the
// group are disrupted; a node that asks for a disruption without an
// approval waits (bashible asks for the approval first, see
// templates/tree/lib/_node_lib.tpl, bb-disruption-gate).
//
// A group with canaries or a soak time (spec.update) is updated in soaked
// batches, canaries first, and halts by itself when a node of a batch
// fails: see canary.go. Its record lives on the group
// (RolloutStateAnnotation), its halt is the condition RolloutHalted, an
// Event and the metric node_manager_rollout_halted.
package approval

import (
	"context"

	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "update-approval"

// Controller applies Plan to each group whenever one of its nodes, the
// group, or the group's bundle changes.
type Controller struct {
	d         *manager.Deps
	opts      Options
	watch     *manager.GroupWatch
	instances nmlistersv1alpha1.InstanceLister
	queue     *loop.Loop
	metrics   *Metrics
	listed    listedGroups
}

// New wires the controller to the shared informers: a change of a group,
// of one of its nodes, of its bundle or of one of its Instances (where
// bashible reports a failed run) queues the group.
func New(d *manager.Deps, opts Options) *Controller {
	c := &Controller{d: d, opts: opts, metrics: newMetrics(d.Registry)}
	c.queue = loop.New(Name, d.Loops, c.sync)
	c.watch = manager.WatchGroups(d, c.queue)
	// WatchGroups queues the group on a change of one of its Instances.
	c.instances = d.Informers.NodeManager.Deckhouse().V1alpha1().Instances().Lister()
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for its informers (the
// bundles among them, so it waits while bashible-apiserver is
// unavailable), then works the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.watch.Synced...) {
		return
	}
	c.queue.Run(ctx, workers)
}
