package bundles

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// historySize is how many events a Store keeps for watches that resume
// from a resourceVersion; an older resourceVersion gets 410 Gone.
const historySize = 1024

// watcherBuffer is how many events a slow watcher may fall behind before
// its watch is closed (the client then relists).
const watcherBuffer = 256

// Event is a change to a served group, or (Type Bookmark, Published nil)
// the end of a watch's initial events at resourceVersion RV.
type Event struct {
	Type      watch.EventType
	Published *Published
	RV        string
	rv        uint64
}

// Store holds the bundles every replica serves: the contents of the
// published Secrets, decoded once per change. Reads never wait for a render.
type Store struct {
	mu     sync.RWMutex
	groups map[string]*Published
	// rv is the list resourceVersion: the newest resourceVersion among the
	// served objects and the deletions seen since start. It derives from
	// the published Secrets alone, so replicas that have seen the same
	// changes list identically; only a relist's changes that come out of
	// order are stamped past it (apply).
	rv       uint64
	floor    uint64 // watches from below this resourceVersion get 410
	history  []Event
	synced   bool
	watchers map[*storeWatcher]struct{}
	// onChange are called, under the lock, for every change.
	onChange []func(old, cur *Published)
	// rvSource is the informer's last synced resourceVersion, used to stamp
	// a deletion the informer noticed only on a relist.
	rvSource func() string

	// pending are the published Secrets Transform received that the
	// handler has not received yet, by Secret name in the order received
	// (the informer delivers a name's versions in that order). The handler
	// decodes the version it receives, outside the informer's queue lock.
	pendingMu sync.Mutex
	pending   map[string][]pendingSecret
}

// pendingSecret is a published Secret as Transform received it, with its
// data, and its resourceVersion as a number.
type pendingSecret struct {
	rv     uint64
	secret *corev1.Secret
}

// maxPendingPerSecret bounds the versions of one Secret kept for the
// handler. The handler follows its informer closely, so only a stalled
// handler reaches it; the oldest is dropped, and the handler, finding that
// version without its data, waits for the next.
const maxPendingPerSecret = 16

// SetResourceVersionSource sets where tombstone deletions get their
// resourceVersion from (the informer's LastSyncResourceVersion).
func (s *Store) SetResourceVersionSource(f func() string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rvSource = f
}

// NewStore returns an empty store. onChange, if set, is called for every
// change (for metrics).
func NewStore(onChange func(old, cur *Published)) *Store {
	s := &Store{groups: map[string]*Published{}, watchers: map[*storeWatcher]struct{}{}, pending: map[string][]pendingSecret{}}
	if onChange != nil {
		s.onChange = append(s.onChange, onChange)
	}
	return s
}

// OnChange adds f to the functions called for every change, including
// those of the initial list. f runs under the store's lock: it must be
// quick and must not call the store.
func (s *Store) OnChange(f func(old, cur *Published)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, f)
}

// Transform is the published-Secret informer's transform. It leaves in the
// informer's cache each data value's SHA-256 instead of the value
// (digestData), which is all the publisher compares, and keeps the Secret
// as received for the handler, which decodes it: the compressed bundles
// were otherwise kept twice by every replica, by the informer and decoded
// by the Store (about 10 MB of a 30 MB live heap at 100 groups). The
// informer delivers every object it transformed, in order per name, so the
// handler must be registered before the informer starts.
func (s *Store) Transform(obj any) (any, error) {
	secret, ok := obj.(*corev1.Secret)
	if !ok || digested(secret) {
		// client-go transforms an object again when a watch-list's initial
		// objects, transformed as they streamed, replace the cache.
		return obj, nil
	}
	if group, ok := strings.CutPrefix(secret.Name, deckhousev1.PublishedBundleSecretPrefix); ok {
		// A relist brings every Secret again; the handler is not given
		// the version already served.
		if cur, ok := s.Get(group); !ok || cur.ResourceVersion != secret.ResourceVersion {
			rv, _ := strconv.ParseUint(secret.ResourceVersion, 10, 64)
			s.pendingMu.Lock()
			list := append(s.pending[secret.Name], pendingSecret{rv: rv, secret: secret})
			if len(list) > maxPendingPerSecret {
				list = slices.Delete(list, 0, len(list)-maxPendingPerSecret)
			}
			s.pending[secret.Name] = list
			s.pendingMu.Unlock()
		}
	}
	return digestData(secret), nil
}

// received returns the Secret Transform received as name at
// resourceVersion rv, if it kept it, and forgets it and every older
// version of name: the handler receives a name's versions in order, so an
// older one left (a relist's copy of a version not yet delivered, the
// object of a deletion) will not be asked for.
func (s *Store) received(name string, rv uint64) *corev1.Secret {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	var found *corev1.Secret
	keep := s.pending[name][:0]
	for _, p := range s.pending[name] {
		switch {
		case p.rv == rv:
			found = p.secret
		case p.rv > rv:
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		delete(s.pending, name)
	} else {
		s.pending[name] = keep
	}
	return found
}

// digestedManager marks a Secret digestData made: its only managed-fields
// entry, one the API never writes (an entry there always has an
// operation), so a Secret from the API is never taken for one.
const digestedManager = deckhousev1.BashibleAPIServerName + " data digests"

// digested reports whether s was made by digestData.
func digested(s *corev1.Secret) bool {
	return len(s.ManagedFields) == 1 && s.ManagedFields[0].Manager == digestedManager && s.ManagedFields[0].Operation == ""
}

// digestData returns s with each data value replaced by its SHA-256: what
// the published-Secret informer keeps (Store.Transform), and what the
// publisher compares (bundleUpToDate, ownWrites). Its managed fields, which
// nothing reads, are replaced by the mark of a digested Secret; a digested
// Secret is returned as it is.
func digestData(s *corev1.Secret) *corev1.Secret {
	if s == nil || digested(s) {
		return s
	}
	out := *s
	out.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: digestedManager}}
	out.Data = make(map[string][]byte, len(s.Data))
	for k, v := range s.Data {
		d := sha256.Sum256(v)
		out.Data[k] = d[:]
	}
	return &out
}

// Handler is the event handler to register on the published-Secret informer.
func (s *Store) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.apply(obj, false) },
		UpdateFunc: func(_, obj any) { s.apply(obj, false) },
		DeleteFunc: func(obj any) { s.apply(obj, true) },
	}
}

// MarkSynced records that the informer's initial list is in: history starts
// here, so a watch from an older resourceVersion must relist. The floor is
// the newest object's resourceVersion, which a client listing from any
// replica can hold; a deletion this replica never saw (it happened before
// the replica started) cannot be replayed to a client resuming from before
// it, which a relist corrects.
func (s *Store) MarkSynced() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = true
	s.floor = s.rv
	s.history = nil
}

// Synced reports whether the initial list has been loaded.
func (s *Store) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

func (s *Store) apply(obj any, deleted bool) {
	tombstone := false
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, tombstone = tomb.Obj, true
	}
	secret, ok := obj.(*corev1.Secret)
	if !ok || !strings.HasPrefix(secret.Name, deckhousev1.PublishedBundleSecretPrefix) {
		return
	}
	group := strings.TrimPrefix(secret.Name, deckhousev1.PublishedBundleSecretPrefix)
	rv, _ := strconv.ParseUint(secret.ResourceVersion, 10, 64)

	var cur *Published
	raw := s.received(secret.Name, rv)
	if !deleted {
		if old, ok := s.Get(group); ok && old.ResourceVersion == secret.ResourceVersion {
			return // a relist replays unchanged objects; nothing happened
		}
		if raw == nil && digested(secret) {
			// Only a handler that missed Transform's copy gets here (one
			// registered after the informer started, or a stalled one).
			klog.ErrorS(nil, "A published bundle reached the Store without its data; the group's previous bundle is served until its Secret changes again",
				"secret", klog.KObj(secret), "resourceVersion", secret.ResourceVersion)
			return
		}
		if raw == nil {
			raw = secret // fed without the transform (tests)
		}
		var err error
		if cur, err = decodeSecret(raw); err != nil {
			// Keep serving what we had: a corrupt Secret must not take the
			// group away. The leader rewrites it on its next publish.
			klog.ErrorS(err, "Ignoring an unreadable published bundle", "secret", klog.KObj(secret))
			return
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.groups[group]
	if !deleted && old != nil {
		if served, _ := strconv.ParseUint(old.ResourceVersion, 10, 64); rv <= served {
			return // a replay of this group's past; one watch never sends it, a relist may
		}
	}
	if tombstone && s.rvSource != nil {
		// The object carries its last resourceVersion, not the deletion's;
		// the relist that revealed the deletion is at or after it.
		if listed, err := strconv.ParseUint(s.rvSource(), 10, 64); err == nil {
			rv = max(rv, listed)
		}
	}
	if deleted && old == nil {
		s.rv = max(s.rv, rv)
		return
	}
	if s.synced && rv <= s.rv {
		// A relist delivers its changes in any order, and a deletion it
		// revealed is stamped with the list's resourceVersion: a newer
		// version of another group may come after it with a smaller one.
		// Its event is stamped past the list's, so that watches resumed
		// from there get it; the object keeps its own.
		rv = s.rv + 1
	}
	s.rv = max(s.rv, rv)
	var ev Event
	switch {
	case deleted:
		delete(s.groups, group)
		gone := *old
		gone.ResourceVersion = strconv.FormatUint(rv, 10)
		ev = Event{Type: watch.Deleted, Published: &gone, rv: rv}
	case old == nil:
		s.groups[group] = cur
		ev = Event{Type: watch.Added, Published: cur, rv: rv}
	default:
		s.groups[group] = cur
		ev = Event{Type: watch.Modified, Published: cur, rv: rv}
	}
	for _, f := range s.onChange {
		f(old, cur)
	}
	if !s.synced {
		return // part of the initial list; watches start after it
	}
	s.history = append(s.history, ev)
	if len(s.history) > historySize {
		drop := len(s.history) - historySize
		s.floor = max(s.floor, s.history[drop-1].rv)
		s.history = slices.Delete(s.history, 0, drop)
	}
	for w := range s.watchers {
		w.send(ev)
	}
}

// Get returns a group's bundle.
func (s *Store) Get(group string) (*Published, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.groups[group]
	return p, ok
}

// List returns every bundle sorted by group, with the store's resourceVersion.
func (s *Store) List() ([]*Published, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Published, 0, len(s.groups))
	for _, p := range s.groups {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Published) int { return strings.Compare(a.Group, b.Group) })
	return out, strconv.FormatUint(s.rv, 10)
}

// Watch streams changes after resourceVersion fromRV ("" or "0": the
// current state as ADDED events first). A resourceVersion older than the
// store's history is answered with 410 Gone so the client relists.
//
// With initialEvents (a client's sendInitialEvents=true, the streaming list
// of client-go informers) the current state comes first whatever fromRV
// says, followed by a Bookmark event marking the end of the initial events.
func (s *Store) Watch(fromRV string, initialEvents bool) (Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &storeWatcher{ch: make(chan Event, watcherBuffer)}
	if initialEvents || fromRV == "" || fromRV == "0" {
		groups := make([]string, 0, len(s.groups))
		for g := range s.groups {
			groups = append(groups, g)
		}
		slices.Sort(groups)
		// Room for every initial event, the bookmark, and live events.
		w.ch = make(chan Event, len(groups)+1+watcherBuffer)
		for _, g := range groups {
			w.send(Event{Type: watch.Added, Published: s.groups[g], rv: s.rv})
		}
		if initialEvents {
			w.send(Event{Type: watch.Bookmark, RV: strconv.FormatUint(s.rv, 10), rv: s.rv})
		}
	} else {
		rv, err := strconv.ParseUint(fromRV, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q is not a resource version this server issued", fromRV))
		}
		if rv < s.floor {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, s.floor))
		}
		// A client that listed on a replica further ahead must not see
		// older states again when this one catches up.
		w.from = rv
		for _, ev := range s.history {
			if ev.rv > rv {
				w.send(ev)
			}
		}
	}
	s.watchers[w] = struct{}{}
	return &StoreWatch{store: s, w: w}, nil
}

// Subscription is a running watch: Events delivers changes and is closed
// when the watch stops or falls behind; Stop ends it. It is what the
// registry's bundle source returns (registry.BundleSource), so a test of
// the registry can feed events of its own.
type Subscription interface {
	Events() <-chan Event
	Stop()
}

// StoreWatch is a running watch on the store.
type StoreWatch struct {
	store *Store
	w     *storeWatcher
	once  sync.Once
}

// Events delivers changes; it is closed when the watch stops or falls behind.
func (sw *StoreWatch) Events() <-chan Event { return sw.w.ch }

// Stop ends the watch.
func (sw *StoreWatch) Stop() {
	sw.once.Do(func() {
		sw.store.mu.Lock()
		defer sw.store.mu.Unlock()
		delete(sw.store.watchers, sw.w)
		sw.w.close()
	})
}

type storeWatcher struct {
	ch     chan Event
	from   uint64
	closed bool
}

// send delivers ev or, if the watcher has fallen behind, closes it. Called
// with the store's lock held.
func (w *storeWatcher) send(ev Event) {
	if w.closed || (ev.rv <= w.from && ev.Type != watch.Bookmark) {
		return
	}
	select {
	case w.ch <- ev:
	default:
		w.close()
	}
}

func (w *storeWatcher) close() {
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
}
