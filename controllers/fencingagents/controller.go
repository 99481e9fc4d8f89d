// Package fencingagents runs the fencing agents: for every NodeGroup with
// spec.fencing it keeps a DaemonSet fencing-agent-<group> in node-manager's
// namespace (DaemonSet in daemonset.go) and the Secret of the group's
// gossip keyring, fencing-agent-gossip-<group> (keys.go), and deletes both
// when the group drops fencing or is deleted. The agent itself is agents/fencing-agent.
//
// The DaemonSets are made here rather than shipped in manifests/ because
// the fenced groups are known only at run time, one DaemonSet per group
// as Deckhouse renders them, each selecting its group's nodes and telling
// its agents their group and mode.
package fencingagents

import (
	"context"

	"k8s.io/client-go/tools/cache"

	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "fencing-agents"

// Controller keeps one DaemonSet per fenced group.
type Controller struct {
	d          *manager.Deps
	opts       Options
	groups     nmlisters.NodeGroupLister
	daemonSets appslisters.DaemonSetLister
	secrets    corelisters.SecretLister
	nodes      corelisters.NodeLister
	synced     []cache.InformerSynced
	queue      *loop.Loop
}

// New wires the controller: a NodeGroup's change queues it, and so does a
// change of a DaemonSet labelled as a fencing agent's (by its group
// label), so a DaemonSet deleted or edited by hand is put back.
func New(d *manager.Deps, opts Options) *Controller {
	groups := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	daemonSets := d.Informers.Namespace.Apps().V1().DaemonSets()
	secrets := d.Informers.Namespace.Core().V1().Secrets()
	nodes := d.Informers.Cluster.Core().V1().Nodes()
	c := &Controller{
		d:          d,
		opts:       opts,
		groups:     groups.Lister(),
		daemonSets: daemonSets.Lister(),
		secrets:    secrets.Lister(),
		nodes:      nodes.Lister(),
		synced: []cache.InformerSynced{groups.Informer().HasSynced, daemonSets.Informer().HasSynced, secrets.Informer().HasSynced, nodes.Informer().HasSynced,
			d.Informers.NodeManager.Deckhouse().V1alpha1().Instances().Informer().HasSynced},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	_, _ = groups.Informer().AddEventHandler(c.queue.Handler(loop.ByName))
	// A DaemonSet or a gossip keyring Secret of the agents queues its group.
	ofAgents := c.queue.Handler(func(obj any) string {
		key := loop.ByLabel(deckhousev1.NodeGroupLabel)(obj)
		if loop.ByLabel(deckhousev1.AppNameLabel)(obj) != deckhousev1.FencingAgentName {
			return ""
		}
		return key
	})
	_, _ = daemonSets.Informer().AddEventHandler(ofAgents)
	_, _ = secrets.Informer().AddEventHandler(ofAgents)
	// A Node's keyring report (or readiness) moves its group's rotation on,
	// and its restricted group label (set from its Instance) lets an old
	// DaemonSet move to selecting by it (sync.go, legacy). Keyed by that
	// label, not by the node's own: a node relabelled into another group
	// queues nothing of it.
	_, _ = nodes.Informer().AddEventHandler(c.queue.Handler(loop.ByLabel(deckhousev1.NodeGroupRestrictedLabel)))
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Run(ctx, workers)
}
