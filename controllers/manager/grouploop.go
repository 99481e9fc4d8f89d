package manager

import (
	"context"

	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	bashiblelisters "github.com/node-manager/node-manager/generated/listers/bashible/v1alpha1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// GroupLoop is the skeleton of a controller keyed by node group that looks
// at a group, its Nodes and its served bundle: a change of any of them
// queues the group. Controllers embed it and supply sync.
type GroupLoop struct {
	Groups  nmlisters.NodeGroupLister
	Bundles bashiblelisters.NodeGroupBundleLister
	Loop    *loop.Loop
	synced  []cache.InformerSynced
}

// NewGroupLoop wires a group-keyed loop named name to the shared informers.
func NewGroupLoop(d *Deps, name string, sync func(ctx context.Context, group string) error) *GroupLoop {
	ng := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	bundles := d.Informers.Bundles.Bashible().V1alpha1().NodeGroupBundles()
	nodeInformer := d.Informers.Cluster.Core().V1().Nodes().Informer()
	g := &GroupLoop{
		Groups:  ng.Lister(),
		Bundles: bundles.Lister(),
		Loop:    loop.New(name, d.Loops, sync),
		synced:  []cache.InformerSynced{ng.Informer().HasSynced, bundles.Informer().HasSynced, nodeInformer.HasSynced},
	}
	_, _ = nodeInformer.AddEventHandler(g.Loop.Handler(loop.ByLabel(deckhousev1.NodeGroupLabel)))
	_, _ = ng.Informer().AddEventHandler(g.Loop.Handler(loop.ByName))
	_, _ = bundles.Informer().AddEventHandler(g.Loop.Handler(loop.ByName))
	return g
}

// Name implements Controller.
func (g *GroupLoop) Name() string { return g.Loop.Name() }

// Run implements Controller: it waits for its informers (the bundles among
// them, so it waits while bashible-apiserver is unavailable), then works.
func (g *GroupLoop) Run(ctx context.Context, workers int) {
	if !HasSynced(ctx, g.Name(), g.synced...) {
		return
	}
	g.Loop.Run(ctx, workers)
}

// Checksum is a group's current configuration checksum as served by
// bashible-apiserver ("" while the group has no bundle yet).
func (g *GroupLoop) Checksum(group string) string {
	b, err := g.Bundles.Get(group)
	if err != nil {
		return ""
	}
	return b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
}
