package bundles

import (
	"crypto/sha256"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// ownWriteWait bounds how long an informer may go on showing what one of
// the leader's writes replaced before that is taken for someone's change
// (a relist can skip the write's own event).
const ownWriteWait = 30 * time.Second

// maxReplacedStates bounds what one record remembers while an informer
// trails a stream of writes.
const maxReplacedStates = 16

// ownWrites remembers the Secrets the leader wrote until its informers
// show them.
//
// Between a write and the watch event that reports it, an informer still
// shows what the write replaced. A publish in that window (publishes
// follow each other within milliseconds when many renders finish) would
// take the old content for someone's change and write again: an update
// from a stale resourceVersion, which the API refuses as a conflict, or a
// create of a Secret that exists. So while the informer shows exactly what
// the leader's last write replaced (the same content and resourceVersion,
// or nothing for a create), the Secret is taken to hold what was written.
// Anything else the informer shows (the write itself, or a third content)
// ends the wait: a change by someone else is rewritten as before.
//
// While the wait lasts, nothing but the informer would show a change the
// informer missed (a relist after a watch gap shows no event for a Secret
// deleted and never seen), so recheck is called to publish again once the
// wait is over.
type ownWrites struct {
	mu      sync.Mutex
	byName  map[string]ownWrite
	now     func() time.Time
	recheck func(after time.Duration)
}

type ownWrite struct {
	// replaced are the states the informer may still show: what it showed
	// and what the API held (the object an update was made from; nothing
	// for a create) when each write it has not shown was made, and the
	// earlier of those writes; wrote is the object the API returned for
	// the last.
	replaced []secretState
	wrote    *corev1.Secret
	at       time.Time
}

// secretState is what a Secret holds (not its identity or history): two
// states are equal when an informer shows the same object.
type secretState struct {
	exists          bool
	resourceVersion string
	digest          [sha256.Size]byte
}

func newOwnWrites(recheck func(after time.Duration)) *ownWrites {
	return &ownWrites{byName: map[string]ownWrite{}, now: time.Now, recheck: recheck}
}

func stateOf(s *corev1.Secret) secretState {
	if s == nil {
		return secretState{}
	}
	h := sha256.New()
	keys := slices.Sorted(maps.Keys(s.Data))
	// encoding/json sorts map keys, so equal content encodes alike.
	_ = json.NewEncoder(h).Encode([]any{s.Type, ptr.Deref(s.Immutable, false), s.Labels, s.Annotations, keys})
	for _, k := range keys {
		d := sha256.Sum256(s.Data[k])
		h.Write(d[:])
	}
	st := secretState{exists: true, resourceVersion: s.ResourceVersion}
	copy(st.digest[:], h.Sum(nil))
	return st
}

// current is what the Secret name holds, given what its informer shows.
func (o *ownWrites) current(name string, shown *corev1.Secret) *corev1.Secret {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.byName[name]
	if !ok {
		return shown
	}
	if waited := o.now().Sub(w.at); waited < ownWriteWait && slices.Contains(w.replaced, stateOf(shown)) {
		o.recheck(ownWriteWait - waited)
		return w.wrote // the informer has not caught up yet
	}
	delete(o.byName, name)
	return shown
}

// wrote records a write of the Secret name: shown is what its informer
// showed, base what the write was made from (the object an update carried
// the resourceVersion of; nil for a create, after a delete too), written
// what the API returned.
func (o *ownWrites) wrote(name string, shown, base, written *corev1.Secret) {
	o.mu.Lock()
	defer o.mu.Unlock()
	replaced := []secretState{stateOf(shown), stateOf(base)}
	if w, ok := o.byName[name]; ok {
		// The informer may not have shown the previous write either
		// (waited out or not: it only gives more states to recognise),
		// nor what that one replaced, the oldest last.
		replaced = append(append([]secretState{stateOf(w.wrote)}, replaced...), w.replaced...)
	}
	replaced = slices.Compact(replaced)
	if len(replaced) > maxReplacedStates {
		replaced = replaced[:maxReplacedStates]
	}
	o.byName[name] = ownWrite{replaced: replaced, wrote: written, at: o.now()}
}

// observed is the informer's add and update hook: once it shows the
// write, the wait is over, even should the Secret be deleted before the
// next publish (which would otherwise look like the create's wait).
func (o *ownWrites) observed(s *corev1.Secret) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.byName[s.Name]; ok && stateOf(s) == stateOf(w.wrote) {
		delete(o.byName, s.Name)
	}
}

// forget drops the record of a Secret the leader deleted.
func (o *ownWrites) forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.byName, name)
}
