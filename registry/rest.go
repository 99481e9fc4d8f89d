package registry

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/node-manager/node-manager/apiserver/access"
	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

// The storages serve only get, list and watch.
var (
	_ rest.Storage              = &REST{}
	_ rest.Scoper               = &REST{}
	_ rest.Getter               = &REST{}
	_ rest.Lister               = &REST{}
	_ rest.Watcher              = &REST{}
	_ rest.TableConvertor       = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// Counter counts requests by resource and verb.
type Counter interface {
	Inc(resource, verb string)
}

// REST serves one resource of computed objects from a bundles.Store.
type REST struct {
	kind    kind
	store   *bundles.Store
	access  *access.Narrower
	counter Counter
	// cache keeps encoded objects of canonical names (a legacy name is
	// built per request, so odd names cannot grow the cache).
	cache objectCache
}

// kind describes one resource.
type kind struct {
	resource string
	singular string
	newObj   func() runtime.Object
	newList  func() runtime.Object
	// fill sets the payload of obj (a newObj) from a published bundle.
	fill func(obj runtime.Object, p *bundles.Published)
	// setItems stores objs (of newObj's type) in list (a newList).
	setItems func(list runtime.Object, objs []runtime.Object)
	// size is the payload size of obj; steps its number of steps, -1 if n/a.
	size  func(obj runtime.Object) int
	steps func(obj runtime.Object) int
}

// Storages returns the REST storage of every resource, keyed by resource.
func Storages(store *bundles.Store, narrower *access.Narrower, counter Counter) map[string]rest.Storage {
	out := map[string]rest.Storage{}
	for _, k := range kinds() {
		out[k.resource] = &REST{kind: k, store: store, access: narrower, counter: counter}
	}
	return out
}

func (r *REST) groupResource() schema.GroupResource {
	return bashiblev1alpha1.Resource(r.kind.resource)
}

// New returns an empty object.
func (r *REST) New() runtime.Object { return r.kind.newObj() }

// NewList returns an empty list.
func (r *REST) NewList() runtime.Object { return r.kind.newList() }

// Destroy releases nothing: the store is shared and outlives the storage.
func (r *REST) Destroy() {}

// NamespaceScoped is false: every object is cluster-scoped.
func (r *REST) NamespaceScoped() bool { return false }

// GetSingularName is the singular resource name, for discovery.
func (r *REST) GetSingularName() string { return r.kind.singular }

// object builds the served object of a bundle.
func (r *REST) object(p *bundles.Published, name string) runtime.Object {
	obj := r.kind.newObj()
	m := obj.(metav1.Object)
	m.SetName(name)
	m.SetResourceVersion(p.ResourceVersion)
	m.SetCreationTimestamp(p.CreationTimestamp)
	m.SetLabels(map[string]string{deckhousev1.NodeGroupLabel: p.Group, deckhousev1.NodeTypeLabel: p.NodeType})
	m.SetAnnotations(map[string]string{
		bashiblev1alpha1.ChecksumAnnotation:          p.Checksum,
		bashiblev1alpha1.KubernetesVersionAnnotation: p.KubernetesVersion,
		bashiblev1alpha1.CRIAnnotation:               p.CRI,
	})
	r.kind.fill(obj, p)
	return obj
}

// notLoaded answers requests that arrive before the published bundles are
// loaded: a partial answer would look like missing groups.
func (r *REST) notLoaded() error {
	if r.store.Synced() {
		return nil
	}
	return apierrors.NewServiceUnavailable("bashible-apiserver has not loaded the published bundles yet; retry shortly")
}

// Get returns one group's object; name may be the legacy <os>.<group>.
func (r *REST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	r.counter.Inc(r.kind.resource, "get")
	if err := r.notLoaded(); err != nil {
		return nil, err
	}
	group, err := ParseName(name)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	scope, err := r.access.ScopeFor(ctx, r.groupResource(), name)
	if err != nil {
		return nil, err
	}
	if !scope.Allows(group) {
		return nil, apierrors.NewForbidden(r.groupResource(), name,
			fmt.Errorf("this identity may read only node group %q, not %q", scope.Group, group))
	}
	p, ok := r.store.Get(group)
	if !ok {
		r.cache.forget(group)
		return nil, apierrors.NewNotFound(r.groupResource(), name)
	}
	if name == group {
		return r.cache.get(group, p.ResourceVersion, func() runtime.Object { return r.object(p, name) }), nil
	}
	// The object keeps the requested name (as Deckhouse does for the legacy form).
	return r.object(p, name), nil
}

// filter matches a bundle against the caller's scope and the list options.
type filter struct {
	scope  access.Scope
	labels labels.Selector
	fields fields.Selector
}

func (r *REST) newFilter(ctx context.Context, options *metainternalversion.ListOptions) (filter, error) {
	scope, err := r.access.ScopeFor(ctx, r.groupResource(), "")
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

// List returns the objects the caller may read. A node or bootstrap token
// sees only its own group.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	r.counter.Inc(r.kind.resource, "list")
	if err := r.notLoaded(); err != nil {
		return nil, err
	}
	f, err := r.newFilter(ctx, options)
	if err != nil {
		return nil, err
	}
	all, rv := r.store.List()
	var items []runtime.Object
	for _, p := range all {
		if f.matches(p) {
			items = append(items, r.object(p, p.Group))
		}
	}
	list := r.kind.newList()
	r.kind.setItems(list, items)
	list.(metav1.ListInterface).SetResourceVersion(rv)
	return list, nil
}

// Watch streams changes to the objects the caller may read: MODIFIED when
// a group's bundle changes, ADDED and DELETED as groups appear and go. A
// resourceVersion older than the server's history gets 410 Gone.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	r.counter.Inc(r.kind.resource, "watch")
	if err := r.notLoaded(); err != nil {
		return nil, err
	}
	f, err := r.newFilter(ctx, options)
	if err != nil {
		return nil, err
	}
	rv, initialEvents := "", false
	if options != nil {
		rv = options.ResourceVersion
		initialEvents = options.SendInitialEvents != nil && *options.SendInitialEvents
	}
	sw, err := r.store.Watch(rv, initialEvents)
	if err != nil {
		return nil, err
	}
	w := &watcher{source: sw, result: make(chan watch.Event), done: make(chan struct{})}
	go w.run(ctx, r, f)
	return w, nil
}

// initialEventsEnd is the bookmark that ends a streaming list's initial events.
func (r *REST) initialEventsEnd(rv string) runtime.Object {
	obj := r.kind.newObj()
	m := obj.(metav1.Object)
	m.SetResourceVersion(rv)
	m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	return obj
}

type watcher struct {
	source   *bundles.StoreWatch
	result   chan watch.Event
	done     chan struct{}
	stopOnce sync.Once
}

func (w *watcher) run(ctx context.Context, r *REST, f filter) {
	defer close(w.result)
	defer w.source.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case ev, ok := <-w.source.Events():
			if !ok {
				return
			}
			var out watch.Event
			if ev.Type == watch.Bookmark {
				out = watch.Event{Type: watch.Bookmark, Object: r.initialEventsEnd(ev.RV)}
			} else if f.matches(ev.Published) {
				out = watch.Event{Type: ev.Type, Object: r.object(ev.Published, ev.Published.Group)}
			} else {
				continue
			}
			select {
			case w.result <- out:
			case <-ctx.Done():
				return
			case <-w.done:
				return
			}
		}
	}
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

func (w *watcher) Stop() { w.stopOnce.Do(func() { close(w.done) }) }

// ConvertToTable prints objects for kubectl: group, node type, checksum
// prefix, steps, size and age; -o wide adds the Kubernetes version, the
// container runtime and the whole checksum.
func (r *REST) ConvertToTable(_ context.Context, object runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "The node group"},
		{Name: "Type", Type: "string", Description: "The group's node type"},
		{Name: "Checksum", Type: "string", Description: "The first 12 characters of the configuration checksum"},
		{Name: "Steps", Type: "integer", Description: "Steps in the group's bundle"},
		{Name: "Size", Type: "string", Description: "Size of the script(s)"},
		{Name: "Age", Type: "string", Description: "Time since the group's bundle was first published"},
		{Name: "Kubernetes", Type: "string", Priority: 1, Description: "The group's Kubernetes version"},
		{Name: "CRI", Type: "string", Priority: 1, Description: "The group's container runtime"},
		{Name: "Full-Checksum", Type: "string", Priority: 1, Description: "The configuration checksum"},
	}}
	if co, ok := object.(runtime.CacheableObject); ok {
		object = co.GetObject()
	}
	var objs []runtime.Object
	if meta, ok := object.(metav1.ListInterface); ok {
		table.ResourceVersion = meta.GetResourceVersion()
		var err error
		if objs, err = listItems(object); err != nil {
			return nil, err
		}
	} else {
		objs = []runtime.Object{object}
	}
	for _, obj := range objs {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil, fmt.Errorf("cannot print %T", obj)
		}
		checksum := m.GetAnnotations()[bashiblev1alpha1.ChecksumAnnotation]
		short := checksum
		if len(short) > 12 {
			short = short[:12]
		}
		steps := any(r.kind.steps(obj))
		if steps == -1 {
			steps = "-"
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Object: runtime.RawExtension{Object: obj},
			Cells: []any{
				m.GetName(), m.GetLabels()[deckhousev1.NodeTypeLabel], short, steps,
				humanSize(r.kind.size(obj)), age(m.GetCreationTimestamp()),
				m.GetAnnotations()[bashiblev1alpha1.KubernetesVersionAnnotation], m.GetAnnotations()[bashiblev1alpha1.CRIAnnotation], checksum,
			},
		})
	}
	return table, nil
}

func humanSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + "Mi"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + "Ki"
	default:
		return strconv.Itoa(n) + "B"
	}
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}
