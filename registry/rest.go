package registry

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/node-manager/node-manager/apiserver/access"
	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/registry/objectname"
)

// Storages returns the REST storage of every resource, keyed by resource.
func Storages(source BundleSource, narrower Narrower, metrics *Metrics) map[string]rest.Storage {
	return map[string]rest.Storage{
		bashiblesResource:        NewBashibles(source, narrower, metrics),
		nodeGroupBundlesResource: NewNodeGroupBundles(source, narrower, metrics),
		bootstrapResource:        NewBootstrap(source, narrower, metrics),
	}
}

// storage is what the REST storages of all three resources share: where
// the objects come from, who may read which, the requests counted, and
// the encoded objects kept. Each resource's file adds its types and
// serves get, list, watch and tables through the functions below.
type storage struct {
	resource schema.GroupResource
	source   BundleSource
	narrower Narrower
	metrics  *Metrics
	// cache keeps encoded objects of canonical names (a legacy name is
	// built per request, so odd names cannot grow the cache).
	cache objectCache
}

func newStorage(resource string, source BundleSource, narrower Narrower, metrics *Metrics) storage {
	return storage{resource: bashiblev1alpha1.Resource(resource), source: source, narrower: narrower, metrics: metrics}
}

// Destroy releases nothing: the source is shared and outlives the storage.
func (s *storage) Destroy() {}

// NamespaceScoped is false: every object is cluster-scoped.
func (s *storage) NamespaceScoped() bool { return false }

// object is a pointer to a served type, such as *v1alpha1.Bashible.
type object[T any] interface {
	*T
	runtime.Object
	metav1.Object
}

// objectList is a pointer to a served list type, such as *v1alpha1.BashibleList.
type objectList[L any] interface {
	*L
	runtime.Object
	metav1.ListInterface
}

// builder makes a group's object from its published bundle, named name:
// the group, or the legacy <os>.<group> a node asked for.
type builder[PT any] func(p *bundles.Published, name string) PT

// objectMeta is the metadata every served object carries: the Secret's
// resourceVersion and creation time, the group and node type as labels,
// the configuration checksum and render details as annotations.
// A bundle's revision number, and the pin when the group is pinned, are
// annotations too.
func objectMeta(p *bundles.Published, name string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name:              name,
		ResourceVersion:   p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp,
		Labels:            map[string]string{deckhousev1.NodeGroupLabel: p.Group, deckhousev1.NodeTypeLabel: p.NodeType},
		Annotations: map[string]string{
			bashiblev1alpha1.ChecksumAnnotation:          p.Checksum,
			bashiblev1alpha1.KubernetesVersionAnnotation: p.KubernetesVersion,
			bashiblev1alpha1.CRIAnnotation:               p.CRI,
		},
	}
	if p.Revision > 0 {
		m.Annotations[bashiblev1alpha1.RevisionAnnotation] = strconv.FormatInt(p.Revision, 10)
	}
	if p.PinnedRevision > 0 {
		m.Annotations[bashiblev1alpha1.PinnedRevisionAnnotation] = strconv.FormatInt(p.PinnedRevision, 10)
	}
	return m
}

// notLoaded answers requests that arrive before the published bundles are
// loaded: a partial answer would look like missing groups.
func (s *storage) notLoaded() error {
	if s.source.Synced() {
		return nil
	}
	return apierrors.NewServiceUnavailable("bashible-apiserver has not loaded the published bundles yet; retry shortly")
}

// get returns one group's object; name may be the legacy <os>.<group>,
// and the object then keeps the requested name (as Deckhouse does).
func get[T any, PT object[T]](ctx context.Context, s *storage, name string, build builder[PT]) (runtime.Object, error) {
	s.metrics.served(s.resource.Resource, "get")
	if err := s.notLoaded(); err != nil {
		return nil, err
	}
	group, err := objectname.Parse(name)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	scope, err := s.narrower.ScopeFor(ctx, s.resource, name)
	if err != nil {
		return nil, err
	}
	if !scope.Allows(group) {
		return nil, apierrors.NewForbidden(s.resource, name,
			fmt.Errorf("this identity may read only node group %q, not %q", scope.Group, group))
	}
	p, ok := s.source.Get(group)
	if !ok {
		s.cache.forget(group)
		return nil, apierrors.NewNotFound(s.resource, name)
	}
	if name == group {
		return s.cache.get(group, p.ResourceVersion, func() runtime.Object { return build(p, name) }), nil
	}
	return build(p, name), nil
}

// list returns the objects the caller may read and the list's
// resourceVersion. A node or bootstrap token sees only its own group.
func list[T any, PT object[T]](ctx context.Context, s *storage, options *metainternalversion.ListOptions, build builder[PT]) ([]T, string, error) {
	s.metrics.served(s.resource.Resource, "list")
	if err := s.notLoaded(); err != nil {
		return nil, "", err
	}
	f, err := s.newFilter(ctx, options)
	if err != nil {
		return nil, "", err
	}
	all, rv := s.source.List()
	items := make([]T, 0, len(all))
	for _, p := range all {
		if f.matches(p) {
			items = append(items, *build(p, p.Group))
		}
	}
	return items, rv, nil
}

// filter matches a bundle against the caller's scope and the list options.
type filter struct {
	scope  access.Scope
	labels labels.Selector
	fields fields.Selector
}

func (s *storage) newFilter(ctx context.Context, options *metainternalversion.ListOptions) (filter, error) {
	scope, err := s.narrower.ScopeFor(ctx, s.resource, "")
	if err != nil {
		return filter{}, err
	}
	f := filter{scope: scope, labels: labels.Everything(), fields: fields.Everything()}
	if options != nil && options.LabelSelector != nil {
		f.labels = options.LabelSelector
	}
	if options != nil && options.FieldSelector != nil {
		f.fields = options.FieldSelector
		for _, req := range f.fields.Requirements() {
			if req.Field != "metadata.name" {
				return filter{}, apierrors.NewBadRequest(fmt.Sprintf("field selector %q is not supported: only metadata.name is", req.Field))
			}
		}
	}
	return f, nil
}

func (f filter) matches(p *bundles.Published) bool {
	return f.scope.Allows(p.Group) &&
		f.labels.Matches(labels.Set{deckhousev1.NodeGroupLabel: p.Group, deckhousev1.NodeTypeLabel: p.NodeType}) &&
		f.fields.Matches(fields.Set{"metadata.name": p.Group})
}
