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

const bashiblesResource = "bashibles"

// Bashibles is the REST storage of bashibles/<group>: the bashible.sh a
// group's nodes run from a systemd timer, which fetches the group's
// nodegroupbundle and applies it.
type Bashibles struct{ storage }

var (
	_ rest.Storage              = &Bashibles{}
	_ rest.Scoper               = &Bashibles{}
	_ rest.Getter               = &Bashibles{}
	_ rest.Lister               = &Bashibles{}
	_ rest.Watcher              = &Bashibles{}
	_ rest.TableConvertor       = &Bashibles{}
	_ rest.SingularNameProvider = &Bashibles{}
)

// NewBashibles serves bashibles from source to the callers narrower lets read them.
func NewBashibles(source BundleSource, narrower Narrower, metrics *Metrics) *Bashibles {
	return &Bashibles{newStorage(bashiblesResource, source, narrower, metrics)}
}

// New returns an empty Bashible.
func (*Bashibles) New() runtime.Object { return &bashiblev1alpha1.Bashible{} }

// NewList returns an empty BashibleList.
func (*Bashibles) NewList() runtime.Object { return &bashiblev1alpha1.BashibleList{} }

// GetSingularName is the singular resource name, for discovery.
func (*Bashibles) GetSingularName() string { return "bashible" }

// Get returns a group's Bashible; name may be the legacy <os>.<group>.
func (r *Bashibles) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return get(ctx, &r.storage, name, newBashible)
}

// List returns the Bashibles the caller may read.
func (r *Bashibles) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	items, rv, err := list(ctx, &r.storage, options, newBashible)
	if err != nil {
		return nil, err
	}
	return &bashiblev1alpha1.BashibleList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: items}, nil
}

// Watch streams changes to the Bashibles the caller may read.
func (r *Bashibles) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return watchObjects(ctx, &r.storage, options, newBashible)
}

// ConvertToTable prints Bashibles for kubectl: no steps, the size of bashible.sh.
func (*Bashibles) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	return table(obj,
		func(l *bashiblev1alpha1.BashibleList) []bashiblev1alpha1.Bashible { return l.Items },
		func(b *bashiblev1alpha1.Bashible) (any, int) {
			return "-", len(b.Data[bashiblev1alpha1.BashibleScriptKey])
		})
}

// newBashible is a group's Bashible: its bashible.sh.
func newBashible(p *bundles.Published, name string) *bashiblev1alpha1.Bashible {
	return &bashiblev1alpha1.Bashible{
		ObjectMeta: objectMeta(p, name),
		Data:       map[string]string{bashiblev1alpha1.BashibleScriptKey: p.Bashible.String()},
	}
}
