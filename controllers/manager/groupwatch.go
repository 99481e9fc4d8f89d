package manager

import (
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	bashiblelisters "github.com/node-manager/node-manager/generated/listers/bashible/v1alpha1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// GroupWatch is what a controller keyed by node group reads: the groups,
// their served bundles, and whether both caches (and the Nodes') have
// synced.
type GroupWatch struct {
	Groups  nmlisters.NodeGroupLister
	Bundles bashiblelisters.NodeGroupBundleLister
	// Synced include the bundles': a controller that waits for them waits
	// while bashible-apiserver is unavailable.
	Synced []cache.InformerSynced
}

// WatchGroups queues a group on queue whenever the group, one of its Nodes
// (by their Instance's group, never their own label), one of its Instances
// or its served bundle changes: the events every controller that looks at
// a group, its nodes and its checksum needs.
func WatchGroups(d *Deps, queue *loop.Loop) *GroupWatch {
	groups := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	bundles := d.Informers.Bundles.Bashible().V1alpha1().NodeGroupBundles()
	nodeInformer := d.Informers.Cluster.Core().V1().Nodes().Informer()
	instances := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances().Informer()
	_, _ = nodeInformer.AddEventHandler(queue.Handler(d.Nodes.ByGroup))
	_, _ = instances.AddEventHandler(queue.Handler(loop.ByLabel(deckhousev1.NodeGroupLabel)))
	_, _ = groups.Informer().AddEventHandler(queue.Handler(loop.ByName))
	_, _ = bundles.Informer().AddEventHandler(queue.Handler(loop.ByName))
	return &GroupWatch{
		Groups:  groups.Lister(),
		Bundles: bundles.Lister(),
		Synced: []cache.InformerSynced{groups.Informer().HasSynced, bundles.Informer().HasSynced, nodeInformer.HasSynced,
			instances.HasSynced},
	}
}

// Checksum is a group's current configuration checksum as served by
// bashible-apiserver ("" while the group has no bundle yet).
func (w *GroupWatch) Checksum(group string) string {
	b, err := w.Bundles.Get(group)
	if err != nil {
		return ""
	}
	return b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
}
