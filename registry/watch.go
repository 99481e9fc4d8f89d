package registry

import (
	"context"
	"sync"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"github.com/node-manager/node-manager/apiserver/bundles"
)

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
