package registry

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/node-manager/node-manager/apiserver/access"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// fakeSource is a BundleSource the test fills by hand. Its watch replays
// the history after a resourceVersion, refuses one below floor with 410
// Gone, and then delivers what the test sends.
type fakeSource struct {
	mu      sync.Mutex
	synced  bool
	groups  map[string]*bundles.Published
	rv      string
	floor   uint64
	history []bundles.Event
	subs    []*fakeSubscription
	// watched records each Watch call's fromRV and initialEvents.
	watched []string
}

var _ BundleSource = &fakeSource{}

func newFakeSource(rv string, groups ...*bundles.Published) *fakeSource {
	f := &fakeSource{synced: true, groups: map[string]*bundles.Published{}, rv: rv}
	for _, p := range groups {
		f.groups[p.Group] = p
	}
	return f
}

func (f *fakeSource) Synced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

func (f *fakeSource) Get(group string) (*bundles.Published, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.groups[group]
	return p, ok
}

func (f *fakeSource) List() ([]*bundles.Published, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*bundles.Published
	for _, g := range f.sortedGroups() {
		out = append(out, f.groups[g])
	}
	return out, f.rv
}

func (f *fakeSource) sortedGroups() []string {
	var gs []string
	for g := range f.groups {
		gs = append(gs, g)
	}
	slices.Sort(gs)
	return gs
}

func (f *fakeSource) Watch(fromRV string, initialEvents bool) (bundles.Subscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watched = append(f.watched, fmt.Sprintf("%s/%t", fromRV, initialEvents))
	sub := &fakeSubscription{ch: make(chan bundles.Event, 64)}
	if initialEvents || fromRV == "" || fromRV == "0" {
		for _, g := range f.sortedGroups() {
			sub.ch <- bundles.Event{Type: watch.Added, Published: f.groups[g]}
		}
		if initialEvents {
			sub.ch <- bundles.Event{Type: watch.Bookmark, RV: f.rv}
		}
	} else {
		from, err := strconv.ParseUint(fromRV, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest("bad resourceVersion " + fromRV)
		}
		if from < f.floor {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, f.floor))
		}
		for _, ev := range f.history {
			if rv, _ := strconv.ParseUint(ev.Published.ResourceVersion, 10, 64); rv > from {
				sub.ch <- ev
			}
		}
	}
	f.subs = append(f.subs, sub)
	return sub, nil
}

// send delivers a live event to every running watch.
func (f *fakeSource) send(ev bundles.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		if !s.stopped.Load() {
			s.ch <- ev
		}
	}
}

// allStopped reports whether every watch the source gave out was stopped.
func (f *fakeSource) allStopped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		if !s.stopped.Load() {
			return false
		}
	}
	return true
}

type fakeSubscription struct {
	ch      chan bundles.Event
	stopped atomic.Bool
}

func (s *fakeSubscription) Events() <-chan bundles.Event { return s.ch }

func (s *fakeSubscription) Stop() { s.stopped.Store(true) }

// realNarrower is an access.Narrower over a fake clientset holding the
// given Instances, synced: narrowing is decided exactly as in the server.
func realNarrower(t *testing.T, instances ...*deckhousev1alpha1.Instance) *access.Narrower {
	t.Helper()
	client := fake.NewSimpleClientset()
	for _, inst := range instances {
		if err := client.Tracker().Add(inst); err != nil {
			t.Fatal(err)
		}
	}
	n := access.NewNarrower(client)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	n.Start(stop)
	deadline := time.Now().Add(10 * time.Second)
	for !n.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatal("the narrower's Instance informer did not sync")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

func instance(node, group string) *deckhousev1alpha1.Instance {
	return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{
		Name: node, Labels: map[string]string{deckhousev1.NodeGroupLabel: group},
	}}
}

// sum is a configuration checksum: 64 hex digits made of s.
func sum(s string) string { return strings.Repeat(s, 64/len(s)) }
