package registry

import (
	"context"
	"fmt"
	"slices"
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
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

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

// watchObjects streams changes to the objects the caller may read:
// MODIFIED when a group's bundle changes, ADDED and DELETED as groups
// appear and go. A resourceVersion older than the source's history gets
// 410 Gone.
func watchObjects[T any, PT object[T]](ctx context.Context, s *storage, options *metainternalversion.ListOptions, build builder[PT]) (watch.Interface, error) {
	s.metrics.served(s.resource.Resource, "watch")
	if err := s.notLoaded(); err != nil {
		return nil, err
	}
	f, err := s.newFilter(ctx, options)
	if err != nil {
		return nil, err
	}
	rv, initialEvents, bookmarks := "", false, false
	if options != nil {
		rv = options.ResourceVersion
		initialEvents = options.SendInitialEvents != nil && *options.SendInitialEvents
		bookmarks = options.AllowWatchBookmarks
	}
	sub, err := s.source.Watch(rv, initialEvents)
	if err != nil {
		return nil, err
	}
	// API Priority and Fairness counts a watch against its priority
	// level's seats until the storage says the watch is set up (the watch
	// cache and etcd storage of k8s.io/apiserver say so; a storage of its
	// own must too). Without it every open watch holds a seat for as long
	// as it lives: a few hundred watching nodes fill the system level, and
	// every further request of every node is refused with 429.
	utilflowcontrol.WatchInitialized(ctx)
	w := &watcher{
		source:    sub,
		filter:    f,
		bookmarks: bookmarks,
		object:    func(p *bundles.Published) runtime.Object { return shared(s, p, build) },
		initEnd:   func(rv string) runtime.Object { return initialEventsEnd(PT(new(T)), rv) },
		result:    make(chan watch.Event),
		done:      make(chan struct{}),
	}
	go w.run(ctx)
	return w, nil
}

// shared is the object of a watch event: for the group's current version
// the same cachedObject every GET and every other watcher gets, so an
// event is serialized once per encoder however many nodes watch (the
// apiserver's watch encoder caches the whole framed event in it, as it
// does for the watch cache's objects); an older version (a watcher
// catching up from history, a deleted group) is built for this watcher
// alone and never displaces the current one.
func shared[T any, PT object[T]](s *storage, p *bundles.Published, build builder[PT]) runtime.Object {
	if current, ok := s.source.Get(p.Group); ok && current.ResourceVersion == p.ResourceVersion {
		return s.cache.get(p.Group, p.ResourceVersion, func() runtime.Object { return build(p, p.Group) })
	}
	return build(p, p.Group)
}

// initialEventsEnd makes obj the bookmark that ends a streaming list's
// initial events.
func initialEventsEnd(obj interface {
	runtime.Object
	metav1.Object
}, rv string) runtime.Object {
	obj.SetResourceVersion(rv)
	obj.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	return obj
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

// watcher turns a source's events into the watch events of one resource,
// dropping what the caller may not read.
type watcher struct {
	source bundles.Subscription
	filter filter
	// bookmarks is the client's allowWatchBookmarks. The bookmark that ends
	// the initial events goes only to a client that allowed bookmarks, as
	// kube-apiserver's watch cache does: k8s.io/apiserver turns a watch
	// without a resourceVersion into one with sendInitialEvents but
	// without bookmarks, and its watch handler panics on an
	// initial-events-end bookmark sent to such a watch (it ends the
	// stream, so the watcher would never see a change).
	bookmarks bool
	object    func(p *bundles.Published) runtime.Object
	initEnd   func(rv string) runtime.Object
	result    chan watch.Event
	done      chan struct{}
	stopOnce  sync.Once
}

func (w *watcher) run(ctx context.Context) {
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
				if !w.bookmarks {
					continue
				}
				out = watch.Event{Type: watch.Bookmark, Object: w.initEnd(ev.RV)}
			} else if w.filter.matches(ev.Published) {
				out = watch.Event{Type: ev.Type, Object: w.object(ev.Published)}
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

// columns are the table columns of every resource: group, node type,
// checksum prefix, steps, size and age; -o wide adds the Kubernetes
// version, the container runtime and the whole checksum.
var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "The node group"},
	{Name: "Type", Type: "string", Description: "The group's node type"},
	{Name: "Checksum", Type: "string", Description: "The first 12 characters of the configuration checksum"},
	{Name: "Revision", Type: "string", Description: "The bundle revision served, and \"(pinned)\" when the group is pinned to it"},
	{Name: "Steps", Type: "integer", Description: "Steps in the group's bundle"},
	{Name: "Size", Type: "string", Description: "Size of the script(s)"},
	{Name: "Age", Type: "string", Description: "Time since the group's bundle was first published"},
	{Name: "Kubernetes", Type: "string", Priority: 1, Description: "The group's Kubernetes version"},
	{Name: "CRI", Type: "string", Priority: 1, Description: "The group's container runtime"},
	{Name: "Full-Checksum", Type: "string", Priority: 1, Description: "The configuration checksum"},
}

// table prints an object or a list of one resource for kubectl. items
// reads a list's items; cells gives an object's steps (a number, or "-"
// for a resource without steps) and the bytes of script it carries.
func table[T, L any, PT object[T], PL objectList[L]](obj runtime.Object, items func(PL) []T, cells func(PT) (steps any, size int)) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: slices.Clone(columns)}
	if co, ok := obj.(runtime.CacheableObject); ok {
		obj = co.GetObject()
	}
	var objs []PT
	switch o := obj.(type) {
	case PT:
		objs = []PT{o}
	case PL:
		t.ResourceVersion = o.GetResourceVersion()
		all := items(o)
		for i := range all {
			objs = append(objs, &all[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T", obj)
	}
	for _, o := range objs {
		checksum := o.GetAnnotations()[bashiblev1alpha1.ChecksumAnnotation]
		short := checksum
		if len(short) > 12 {
			short = short[:12]
		}
		steps, size := cells(o)
		t.Rows = append(t.Rows, metav1.TableRow{
			Object: runtime.RawExtension{Object: o},
			Cells: []any{
				o.GetName(), o.GetLabels()[deckhousev1.NodeTypeLabel], short, revisionCell(o.GetAnnotations()), steps,
				humanSize(size), age(o.GetCreationTimestamp()),
				o.GetAnnotations()[bashiblev1alpha1.KubernetesVersionAnnotation], o.GetAnnotations()[bashiblev1alpha1.CRIAnnotation], checksum,
			},
		})
	}
	return t, nil
}

// revisionCell is the Revision column: the revision served, "(pinned)"
// added while the group is pinned, "-" for a bundle without one.
func revisionCell(annotations map[string]string) string {
	rev := annotations[bashiblev1alpha1.RevisionAnnotation]
	switch {
	case rev == "":
		return "-"
	case annotations[bashiblev1alpha1.PinnedRevisionAnnotation] != "":
		return rev + " (pinned)"
	default:
		return rev
	}
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
