package bundles

import (
	"bytes"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/templates"
)

// secretFor is a published Secret whose bashible.sh is version (so tests
// can tell bundles apart) with a true checksum.
func secretFor(t *testing.T, group, version string, rv int) *corev1.Secret {
	t.Helper()
	steps := map[string]string{"000_a.sh": "a"}
	data, err := encodeSecretData(&Published{Group: group, NodeType: "Static", Checksum: templates.Checksum(version, steps), Bashible: NewScript(version), Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.PublishedBundleSecretPrefix + group, Namespace: "ns", ResourceVersion: strconv.Itoa(rv)}, Data: data}
}

func next(t *testing.T, w Subscription) Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event")
	}
	return Event{}
}

func TestStoreListWatchAndExpiry(t *testing.T) {
	var changes int
	s := NewStore(func(_, _ *Published) { changes++ })
	h := s.Handler()
	h.OnAdd(secretFor(t, "a", "sum-a1", 10), true)
	h.OnAdd(secretFor(t, "b", "sum-b1", 12), true)
	s.MarkSynced()
	if !s.Synced() {
		t.Fatal("not synced")
	}
	all, rv := s.List()
	if len(all) != 2 || all[0].Group != "a" || rv != "12" {
		t.Fatalf("list: %d items at rv %s", len(all), rv)
	}

	if _, err := s.Watch("11", false); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch below the floor: want 410, got %v", err)
	}
	if _, err := s.Watch("abc", false); !apierrors.IsBadRequest(err) {
		t.Fatalf("watch from a malformed resourceVersion: want 400, got %v", err)
	}

	fromList, err := s.Watch(rv, false)
	if err != nil {
		t.Fatal(err)
	}
	defer fromList.Stop()
	h.OnUpdate(nil, secretFor(t, "a", "sum-a2", 15))
	h.OnDelete(secretFor(t, "b", "sum-b1", 17))
	if ev := next(t, fromList); ev.Type != watch.Modified || ev.Published.Bashible.String() != "sum-a2" {
		t.Fatalf("want MODIFIED a, got %s %+v", ev.Type, ev.Published)
	}
	if ev := next(t, fromList); ev.Type != watch.Deleted || ev.Published.Group != "b" || ev.Published.ResourceVersion != "17" {
		t.Fatalf("want DELETED b at 17, got %s %+v", ev.Type, ev.Published)
	}

	// A watch resuming from between the two changes gets only the second.
	resumed, err := s.Watch("15", false)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	if ev := next(t, resumed); ev.Type != watch.Deleted {
		t.Fatalf("resumed watch: want DELETED, got %s", ev.Type)
	}

	// A streaming list gets the current state, then the bookmark.
	initial, err := s.Watch("", true)
	if err != nil {
		t.Fatal(err)
	}
	defer initial.Stop()
	if ev := next(t, initial); ev.Type != watch.Added || ev.Published.Group != "a" {
		t.Fatalf("initial event: %s %+v", ev.Type, ev.Published)
	}
	if ev := next(t, initial); ev.Type != watch.Bookmark || ev.RV != "17" {
		t.Fatalf("want the initial-events bookmark at 17, got %s %q", ev.Type, ev.RV)
	}

	// A tombstone with an old resourceVersion (and no relist's to stamp it
	// with) does not move the list back: its event comes after the list.
	h.OnAdd(secretFor(t, "c", "sum-c", 20), false)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/" + deckhousev1.PublishedBundleSecretPrefix + "c", Obj: secretFor(t, "c", "sum-c", 20)})
	if _, rv := s.List(); rv != "21" {
		t.Errorf("rv after a tombstone = %s, want 21", rv)
	}
	if changes != 6 {
		t.Errorf("onChange called %d times, want 6", changes)
	}

	// A relist replays unchanged objects and, after sync, nothing older
	// than what is served of the group: neither is an event.
	replay, err := s.Watch("21", false)
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Stop()
	h.OnUpdate(nil, secretFor(t, "a", "sum-a2", 15))
	h.OnUpdate(nil, secretFor(t, "a", "sum-a1", 10))
	h.OnAdd(secretFor(t, "d", "sum-d", 22), false)
	if ev := next(t, replay); ev.Published.Group != "d" || ev.rv != 22 {
		t.Fatalf("want only the new group d at 22, got %s %s at %d", ev.Type, ev.Published.Group, ev.rv)
	}
	if p, _ := s.Get("a"); p.Bashible.String() != "sum-a2" {
		t.Fatalf("a replay of group a's past replaced it: serves %s", p.Bashible)
	}
}

// TestARelistsChangesComeInAnyOrder: a relist reveals a deletion (stamped
// with the list's resourceVersion) and a newer version of another group
// (with a smaller one), in that order. The newer version is served, and a
// watch resumed from the deletion gets it.
func TestARelistsChangesComeInAnyOrder(t *testing.T) {
	s := NewStore(nil)
	s.SetResourceVersionSource(func() string { return "100" })
	h := s.Handler()
	h.OnAdd(secretFor(t, "a", "a1", 30), true)
	h.OnAdd(secretFor(t, "b", "b1", 31), true)
	s.MarkSynced()
	w, err := s.Watch("31", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/" + deckhousev1.PublishedBundleSecretPrefix + "b", Obj: secretFor(t, "b", "b1", 31)})
	if ev := next(t, w); ev.Type != watch.Deleted || ev.rv != 100 {
		t.Fatalf("want DELETED b at the relist's 100, got %s at %d", ev.Type, ev.rv)
	}
	resumed, err := s.Watch("100", false)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	h.OnUpdate(nil, secretFor(t, "a", "a2", 95))
	if p, _ := s.Get("a"); p.Bashible.String() != "a2" || p.ResourceVersion != "95" {
		t.Fatalf("after the relist: serves %s at %s, want a2 at 95", p.Bashible, p.ResourceVersion)
	}
	for _, sub := range []Subscription{w, resumed} {
		if ev := next(t, sub); ev.Type != watch.Modified || ev.Published.Bashible.String() != "a2" || ev.rv != 101 {
			t.Fatalf("want MODIFIED a2 stamped past the list, at 101; got %s %s at %d", ev.Type, ev.Published.Bashible, ev.rv)
		}
	}
	if _, rv := s.List(); rv != "101" {
		t.Fatalf("list at %s, want 101", rv)
	}
}

func TestTombstoneDeletionIsSeenAfterAList(t *testing.T) {
	s := NewStore(nil)
	s.SetResourceVersionSource(func() string { return "40" })
	h := s.Handler()
	h.OnAdd(secretFor(t, "a", "sum-a", 30), true)
	s.MarkSynced()
	_, rv := s.List()
	w, err := s.Watch(rv, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/" + deckhousev1.PublishedBundleSecretPrefix + "a", Obj: secretFor(t, "a", "sum-a", 30)})
	if ev := next(t, w); ev.Type != watch.Deleted || ev.rv != 40 {
		t.Fatalf("want DELETED stamped with the relist's resourceVersion 40, got %s at %d", ev.Type, ev.rv)
	}
}

func TestWatchFromAheadSkipsOlderLiveEvents(t *testing.T) {
	s := NewStore(nil)
	h := s.Handler()
	s.MarkSynced()
	w, err := s.Watch("50", false) // the client listed on a replica further ahead
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	h.OnAdd(secretFor(t, "a", "old", 45), false)
	h.OnAdd(secretFor(t, "b", "new", 55), false)
	if ev := next(t, w); ev.Published.Group != "b" {
		t.Fatalf("the client already had state at 50; want only b at 55, got %s", ev.Published.Group)
	}
}

func TestStoreKeepsServingWhenASecretIsCorrupt(t *testing.T) {
	s := NewStore(nil)
	h := s.Handler()
	h.OnAdd(secretFor(t, "a", "sum-a1", 10), true)
	s.MarkSynced()
	bad := secretFor(t, "a", "x", 11)
	bad.Data[deckhousev1.PublishedBundleKey] = []byte("not gzip")
	h.OnUpdate(nil, bad)
	// Content that does not match its checksum is refused too.
	p := &Published{Group: "a", Checksum: "0000", Bashible: NewScript("tampered"), Steps: map[string]string{}}
	tampered, err := encodeSecretData(p)
	if err != nil {
		t.Fatal(err)
	}
	forged := secretFor(t, "a", "x", 12)
	forged.Data = tampered
	h.OnUpdate(nil, forged)
	if p, ok := s.Get("a"); !ok || p.Bashible.String() != "sum-a1" {
		t.Fatalf("a corrupt Secret must not replace the served bundle: %+v", p)
	}
}

func TestSlowWatcherIsClosed(t *testing.T) {
	s := NewStore(nil)
	s.MarkSynced()
	w, err := s.Watch("0", false)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	capacity := watcherBuffer + 1 // a watch from "0" has room for the bookmark too
	for i := range capacity + 1 {
		h.OnUpdate(nil, secretFor(t, "a", "sum-"+strconv.Itoa(i), 100+i))
	}
	n := 0
	for range w.Events() {
		n++
	}
	if n != capacity {
		t.Fatalf("a watcher that fell behind got %d events before its channel closed, want %d", n, capacity)
	}
	w.Stop()
}

// TestEqualScriptsAreHeldOnce: a script two bundles share (most steps
// render alike for many groups) is held once, however many groups and
// forms (the Store's, the renderer's) hold it.
func TestEqualScriptsAreHeldOnce(t *testing.T) {
	a, err := decodeSecret(secretFor(t, "a", "same", 10))
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeSecret(secretFor(t, "b", "same", 11))
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(a.Steps["000_a.sh"]) != unsafe.StringData(b.Steps["000_a.sh"]) ||
		!a.Bashible.Equal(b.Bashible) || a.Bashible.pieces[0] != b.Bashible.pieces[0] {
		t.Error("two decoded bundles hold separate copies of the same scripts")
	}
	rendered := &Published{Bashible: NewScript("same"), Steps: map[string]string{"000_a.sh": strings.Repeat("a", 1)}}
	rendered.intern()
	if unsafe.StringData(rendered.Steps["000_a.sh"]) != unsafe.StringData(a.Steps["000_a.sh"]) {
		t.Error("a render's result and the decoded Secret hold separate copies of the same step")
	}
}

// TestTheInformerKeepsDigestsAndTheStoreTheBundles feeds the Store as its
// informer does: each object through Transform first, then the handler,
// in order per name, with several versions transformed before the handler
// receives the first.
func TestTheInformerKeepsDigestsAndTheStoreTheBundles(t *testing.T) {
	s := NewStore(nil)
	h := s.Handler()
	transform := func(secret *corev1.Secret) *corev1.Secret {
		t.Helper()
		raw := secret.Data[deckhousev1.PublishedBundleKey]
		out, err := s.Transform(secret)
		if err != nil {
			t.Fatal(err)
		}
		kept := out.(*corev1.Secret)
		if want := sha256.Sum256(raw); len(kept.Data) != 1 || !bytes.Equal(kept.Data[deckhousev1.PublishedBundleKey], want[:]) {
			t.Fatalf("the informer keeps %d keys, %d bytes of %s; want its SHA-256 alone", len(kept.Data), len(kept.Data[deckhousev1.PublishedBundleKey]), deckhousev1.PublishedBundleKey)
		}
		return kept
	}
	served := func(want string) {
		t.Helper()
		p, ok := s.Get("a")
		if !ok || p.Bashible.String() != want {
			t.Fatalf("serves %v (%t), want %s", p, ok, want)
		}
	}
	nothingWaits := func(after string) {
		t.Helper()
		s.pendingMu.Lock()
		defer s.pendingMu.Unlock()
		if len(s.pending) != 0 {
			t.Fatalf("%s: Secrets of %d names still kept for the handler", after, len(s.pending))
		}
	}
	unreadable := func(rv int) *corev1.Secret {
		bad := secretFor(t, "a", "bad", rv)
		bad.Data[deckhousev1.PublishedBundleKey] = []byte("not gzip")
		return bad
	}

	// A watch-list's objects are transformed as they stream and again
	// when they replace the cache: the second leaves them as they are.
	first := transform(secretFor(t, "a", "v1", 10))
	twice, err := s.Transform(first)
	if err != nil || twice != first {
		t.Fatalf("transforming a transformed Secret: %v, %v", twice, err)
	}
	h.OnAdd(twice.(*corev1.Secret), true)
	served("v1")
	s.MarkSynced()

	// Two versions received before the handler gets the first: each is
	// served in turn.
	v2, v3 := transform(secretFor(t, "a", "v2", 11)), transform(secretFor(t, "a", "v3", 12))
	h.OnUpdate(nil, v2)
	served("v2")
	h.OnUpdate(v2, v3)
	served("v3")
	nothingWaits("the handler received both")

	// A readable version, then an unreadable one, both received before
	// the handler gets the first: the readable one is served, and stays.
	v4, v5 := transform(secretFor(t, "a", "v4", 13)), transform(unreadable(14))
	h.OnUpdate(v3, v4)
	served("v4")
	h.OnUpdate(v4, v5)
	served("v4")
	nothingWaits("an unreadable version")

	// A relist brings the served version again: it is not kept for the
	// handler (which is not given it: client-go delivers no update of an
	// unchanged resourceVersion), and nothing happens if it is.
	again := secretFor(t, "a", "v4", 13)
	h.OnUpdate(v5, transform(again))
	served("v4")
	nothingWaits("a relist's copy of the served version")

	// A relist's copy of a version not yet delivered (a watch broke after
	// receiving it) is delivered once; the copy left behind goes with it.
	v6 := transform(secretFor(t, "a", "v6", 16))
	transform(secretFor(t, "a", "v6", 16))
	h.OnUpdate(v5, v6)
	served("v6")
	nothingWaits("a version received twice")

	// A version whose Secret reaches the handler without its data (a
	// handler that missed the transform) keeps the one served.
	h.OnUpdate(v6, digestData(secretFor(t, "a", "v7", 17)))
	served("v6")

	// A deletion, transformed as the watch received it, forgets its copy;
	// the group is no longer served.
	gone := transform(secretFor(t, "a", "v6", 18))
	h.OnDelete(gone)
	if _, ok := s.Get("a"); ok {
		t.Fatal("served after its deletion")
	}
	nothingWaits("the deletion")

	// A stalled handler: the oldest versions are dropped past the bound.
	for rv := 20; rv < 20+2*maxPendingPerSecret; rv++ {
		transform(secretFor(t, "a", "v"+strconv.Itoa(rv), rv))
	}
	if n := len(s.pending[deckhousev1.PublishedBundleSecretPrefix+"a"]); n != maxPendingPerSecret {
		t.Fatalf("%d versions kept for a stalled handler, want %d", n, maxPendingPerSecret)
	}

	// Something else in the namespace is digested and left to others.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", ResourceVersion: "15"}, Data: map[string][]byte{"k": []byte("v")}}
	out, _ := s.Transform(other)
	if d := out.(*corev1.Secret).Data["k"]; len(d) != sha256.Size || len(s.pending) != 1 || string(other.Data["k"]) != "v" {
		t.Fatalf("another Secret: kept %q, %d names pending, the received object changed to %q", d, len(s.pending), other.Data["k"])
	}
}
