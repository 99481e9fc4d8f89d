package registry

import (
	"context"
	"maps"
	"slices"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

const nodeGroupBundlesResource = "nodegroupbundles"

// NodeGroupBundles is the REST storage of nodegroupbundles/<group>: the
// steps (<NNN>_<step>.sh) bashible.sh runs on a group's nodes.
type NodeGroupBundles struct{ storage }

var (
	_ rest.Storage              = &NodeGroupBundles{}
	_ rest.Scoper               = &NodeGroupBundles{}
	_ rest.Getter               = &NodeGroupBundles{}
	_ rest.Lister               = &NodeGroupBundles{}
	_ rest.Watcher              = &NodeGroupBundles{}
	_ rest.TableConvertor       = &NodeGroupBundles{}
	_ rest.SingularNameProvider = &NodeGroupBundles{}
)

// NewNodeGroupBundles serves nodegroupbundles from source to the callers
// narrower lets read them.
func NewNodeGroupBundles(source BundleSource, narrower Narrower, metrics *Metrics) *NodeGroupBundles {
	return &NodeGroupBundles{newStorage(nodeGroupBundlesResource, source, narrower, metrics)}
}

// New returns an empty NodeGroupBundle.
func (*NodeGroupBundles) New() runtime.Object { return &bashiblev1alpha1.NodeGroupBundle{} }

// NewList returns an empty NodeGroupBundleList.
func (*NodeGroupBundles) NewList() runtime.Object { return &bashiblev1alpha1.NodeGroupBundleList{} }

// GetSingularName is the singular resource name, for discovery.
func (*NodeGroupBundles) GetSingularName() string { return "nodegroupbundle" }

// Get returns a group's NodeGroupBundle; name may be the legacy <os>.<group>.
func (r *NodeGroupBundles) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return get(ctx, &r.storage, name, newNodeGroupBundle)
}

// List returns the NodeGroupBundles the caller may read.
func (r *NodeGroupBundles) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	items, rv, err := list(ctx, &r.storage, options, newNodeGroupBundle)
	if err != nil {
		return nil, err
	}
	return &bashiblev1alpha1.NodeGroupBundleList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: items}, nil
}

// Watch streams changes to the NodeGroupBundles the caller may read.
func (r *NodeGroupBundles) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return watchObjects(ctx, &r.storage, options, newNodeGroupBundle)
}

// ConvertToTable prints NodeGroupBundles for kubectl: the number of steps
// and their total size.
func (*NodeGroupBundles) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return table(obj,
		func(l *bashiblev1alpha1.NodeGroupBundleList) []bashiblev1alpha1.NodeGroupBundle { return l.Items },
		func(b *bashiblev1alpha1.NodeGroupBundle) (any, int) {
			size := 0
			for _, step := range b.Data {
				size += len(step)
			}
			return len(b.Data), size
		})
}

// newNodeGroupBundle is a group's NodeGroupBundle: its steps and its kept
// revisions.
func newNodeGroupBundle(p *bundles.Published, name string) *bashiblev1alpha1.NodeGroupBundle {
	b := &bashiblev1alpha1.NodeGroupBundle{ObjectMeta: objectMeta(p, name), Data: maps.Clone(p.Steps)}
	for _, r := range p.Revisions {
		b.Revisions = append(b.Revisions, bashiblev1alpha1.NodeGroupBundleRevision{
			Revision: r.Revision, Checksum: r.Checksum, PublishedAt: r.Published, ChangedSteps: slices.Clone(r.ChangedSteps),
		})
	}
	return b
}
