package registry

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

// bootstrapResource is the resource's path segment: literally "bootstrap",
// as Deckhouse names it, not a plural.
const bootstrapResource = "bootstrap"

// Bootstrap is the REST storage of bootstrap/<group>: the script that
// turns a fresh machine into a node of the group (it installs bashible.sh
// and runs it once), fetched with the group's bootstrap token.
type Bootstrap struct{ storage }

var (
	_ rest.Storage              = &Bootstrap{}
	_ rest.Scoper               = &Bootstrap{}
	_ rest.Getter               = &Bootstrap{}
	_ rest.Lister               = &Bootstrap{}
	_ rest.Watcher              = &Bootstrap{}
	_ rest.TableConvertor       = &Bootstrap{}
	_ rest.SingularNameProvider = &Bootstrap{}
)

// NewBootstrap serves bootstrap from source to the callers narrower lets read it.
func NewBootstrap(source BundleSource, narrower Narrower, metrics *Metrics) *Bootstrap {
	return &Bootstrap{newStorage(bootstrapResource, source, narrower, metrics)}
}

// New returns an empty Bootstrap.
func (*Bootstrap) New() runtime.Object { return &bashiblev1alpha1.Bootstrap{} }

// NewList returns an empty BootstrapList.
func (*Bootstrap) NewList() runtime.Object { return &bashiblev1alpha1.BootstrapList{} }

// GetSingularName is the singular resource name, for discovery.
func (*Bootstrap) GetSingularName() string { return "bootstrap" }

// Get returns a group's Bootstrap; name may be the legacy <os>.<group>.
func (r *Bootstrap) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return get(ctx, &r.storage, name, newBootstrap)
}

// List returns the Bootstraps the caller may read.
func (r *Bootstrap) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	items, rv, err := list(ctx, &r.storage, options, newBootstrap)
	if err != nil {
		return nil, err
	}
	return &bashiblev1alpha1.BootstrapList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: items}, nil
}

// Watch streams changes to the Bootstraps the caller may read.
func (r *Bootstrap) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return watchObjects(ctx, &r.storage, options, newBootstrap)
}

// ConvertToTable prints Bootstraps for kubectl: no steps, the size of the script.
func (*Bootstrap) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return table(obj,
		func(l *bashiblev1alpha1.BootstrapList) []bashiblev1alpha1.Bootstrap { return l.Items },
		func(b *bashiblev1alpha1.Bootstrap) (any, int) { return "-", len(b.Bootstrap) })
}

// newBootstrap is a group's Bootstrap: its bootstrap script.
func newBootstrap(p *bundles.Published, name string) *bashiblev1alpha1.Bootstrap {
	return &bashiblev1alpha1.Bootstrap{ObjectMeta: objectMeta(p, name), Bootstrap: p.Bootstrap}
}
