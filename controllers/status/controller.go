// Package status keeps NodeGroup status (node counts, conditions, the
// printer columns' summary) and the per-node update-state metric.
package status

import (
	"context"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/node-manager/node-manager/controllers/clusterapi"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "nodegroup-status"

// Controller writes NodeGroup status and the node-state metrics.
type Controller struct {
	d       *manager.Deps
	watch   *manager.GroupWatch
	queue   *loop.Loop
	metrics *Metrics
	// instances are counted per group for status.instances.
	instances nmlistersv1alpha1.InstanceLister
	// components decide which fields are inert (InertFields).
	components Components
	// cloud reads the CloudEphemeral groups' sizes (nil without a cloud);
	// cloudSynced is its informer's.
	cloud       CloudSizer
	cloudSynced []cache.InformerSynced

	mu sync.Mutex // serializes export
}

// New wires the controller to the shared informers: a change of a group,
// of one of its nodes, of one of its Instances or of its bundle queues the
// group. components are the optional parts this process runs, which decide
// which NodeGroup fields take effect.
func New(d *manager.Deps, components Components) *Controller {
	inst := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances()
	c := &Controller{d: d, metrics: newMetrics(d.Registry), instances: inst.Lister(),
		components: components}
	c.queue = loop.New(Name, d.Loops, c.sync)
	c.watch = manager.WatchGroups(d, c.queue) // Instances included
	if cs := components.CloudSizes; cs != nil {
		// A group's MachineDeployment changes its desired size; a
		// Machine, its failures.
		c.cloud = cs
		for _, inf := range cs.Informers() {
			_, _ = inf.AddEventHandler(c.queue.Handler(clusterapi.GroupOf))
			c.cloudSynced = append(c.cloudSynced, inf.HasSynced)
		}
	}
	d.Registry.MustRegister(NewGroupSeries(c.watch.Groups))
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for its informers (the
// bundles among them, so it waits while bashible-apiserver is
// unavailable), then works the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, append(c.watch.Synced, c.cloudSynced...)...) {
		return
	}
	c.queue.Run(ctx, workers)
}
