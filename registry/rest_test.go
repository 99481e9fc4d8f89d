package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

// served is what every storage of this package is.
type served interface {
	rest.Storage
	rest.Scoper
	rest.Getter
	rest.Lister
	rest.Watcher
	rest.TableConvertor
	rest.SingularNameProvider
}

// published three days and a minute ago, so the table's age is "3d".
var published = metav1.NewTime(time.Now().Add(-72*time.Hour - time.Minute))

func worker() *bundles.Published {
	return &bundles.Published{
		Group: "worker", NodeType: "Static", KubernetesVersion: "1.36", CRI: "Containerd", Checksum: sum("ab"),
		Bashible:  bundles.NewScript("#!/usr/bin/env bash\necho bashible\n"),
		Steps:     map[string]string{"000_a.sh": "echo a", "010_b.sh": strings.Repeat("b", 2042)},
		Bootstrap: "#!/bin/bash\necho bootstrap\n", ResourceVersion: "10", CreationTimestamp: published,
	}
}

func master() *bundles.Published {
	return &bundles.Published{
		Group: "master", NodeType: "CloudPermanent", KubernetesVersion: "1.35", CRI: "Containerd", Checksum: sum("cd"),
		Bashible: bundles.NewScript("#!/usr/bin/env bash\n"), Steps: map[string]string{"000_m.sh": "echo m"},
		Bootstrap: "#!/bin/bash\n", ResourceVersion: "12", CreationTimestamp: published,
	}
}

// Callers: an administrator, the node w1 (its Instance is in worker) and a
// bootstrap token issued for master.
var (
	admin       = &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}
	nodeW1      = &user.DefaultInfo{Name: "system:node:w1", Groups: []string{"system:nodes"}}
	masterToken = &user.DefaultInfo{Name: "system:bootstrap:abcdef",
		Groups: []string{"system:bootstrappers", deckhousev1.BootstrappersGroup, deckhousev1.BootstrapperGroup("master")}}
)

func ptr[T any](v T) *T { return &v }

func as(u user.Info) context.Context {
	return genericapirequest.WithUser(context.Background(), u)
}

// resources are the three storages with what each serves of a bundle.
var resources = []struct {
	name     string
	singular string
	payload  func(runtime.Object) string
	// steps and size are the worker's table cells.
	steps any
	size  string
}{
	{"bashibles", "bashible", func(o runtime.Object) string {
		return o.(*bashiblev1alpha1.Bashible).Data[bashiblev1alpha1.BashibleScriptKey]
	}, "-", "34B"},
	{"nodegroupbundles", "nodegroupbundle", func(o runtime.Object) string {
		d := o.(*bashiblev1alpha1.NodeGroupBundle).Data
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(d)) {
			b.WriteString(k + "=" + d[k] + ";")
		}
		return b.String()
	}, 2, "2.0Ki"},
	{"bootstrap", "bootstrap", func(o runtime.Object) string {
		return o.(*bashiblev1alpha1.Bootstrap).Bootstrap
	}, "-", "27B"},
}

// wantPayload is what each resource serves of the worker's bundle.
var wantPayload = map[string]string{
	"bashibles":        worker().Bashible.String(),
	"nodegroupbundles": "000_a.sh=echo a;010_b.sh=" + strings.Repeat("b", 2042) + ";",
	"bootstrap":        worker().Bootstrap,
}

type fixture struct {
	source   *fakeSource
	metrics  *Metrics
	storages map[string]served
}

// setUp serves worker and master (list resourceVersion 12) to callers
// narrowed by a real access.Narrower that knows node w1's Instance.
func setUp(t *testing.T) fixture {
	t.Helper()
	f := fixture{source: newFakeSource("12", worker(), master()), metrics: NewMetrics(), storages: map[string]served{}}
	for name, s := range Storages(f.source, realNarrower(t, instance("w1", "worker")), f.metrics) {
		f.storages[name] = s.(served)
	}
	return f
}

// plain is the object behind a served one (Get wraps canonical names in a
// cachedObject).
func plain(o runtime.Object) runtime.Object {
	if co, ok := o.(runtime.CacheableObject); ok {
		return co.GetObject()
	}
	return o
}

func TestStoragesServeTheThreeResourcesClusterScoped(t *testing.T) {
	f := setUp(t)
	if len(f.storages) != len(resources) {
		t.Fatalf("Storages serves %d resources, want %d", len(f.storages), len(resources))
	}
	for _, r := range resources {
		s, ok := f.storages[r.name]
		if !ok {
			t.Fatalf("Storages does not serve %s", r.name)
		}
		if s.GetSingularName() != r.singular || s.NamespaceScoped() {
			t.Errorf("%s: singular %q, namespaced %t; want %q, cluster-scoped", r.name, s.GetSingularName(), s.NamespaceScoped(), r.singular)
		}
	}
}

func TestGetServesTheGroupsBundleWithTheChecksumAnnotation(t *testing.T) {
	f := setUp(t)
	for _, r := range resources {
		obj, err := f.storages[r.name].Get(as(admin), "worker", &metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s/worker: %v", r.name, err)
		}
		obj = plain(obj)
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		if m.GetName() != "worker" || m.GetResourceVersion() != "10" || !published.Equal(ptr(m.GetCreationTimestamp())) {
			t.Errorf("%s/worker: name %q, resourceVersion %q, created %v", r.name, m.GetName(), m.GetResourceVersion(), m.GetCreationTimestamp())
		}
		if got := m.GetAnnotations()[bashiblev1alpha1.ChecksumAnnotation]; got != sum("ab") {
			t.Errorf("%s/worker: annotation %s = %q, want the group's checksum", r.name, bashiblev1alpha1.ChecksumAnnotation, got)
		}
		if got := m.GetAnnotations(); got[bashiblev1alpha1.KubernetesVersionAnnotation] != "1.36" || got[bashiblev1alpha1.CRIAnnotation] != "Containerd" {
			t.Errorf("%s/worker: render annotations %v", r.name, got)
		}
		if got := m.GetLabels(); got[deckhousev1.NodeGroupLabel] != "worker" || got[deckhousev1.NodeTypeLabel] != "Static" {
			t.Errorf("%s/worker: labels %v", r.name, got)
		}
		if got := r.payload(obj); got != wantPayload[r.name] {
			t.Errorf("%s/worker serves %q, want %q", r.name, got, wantPayload[r.name])
		}
	}
}

func TestLegacyNameServesTheGroupUnderTheRequestedName(t *testing.T) {
	f := setUp(t)
	for _, r := range resources {
		obj, err := f.storages[r.name].Get(as(admin), "ubuntu-lts.worker", &metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s/ubuntu-lts.worker: %v", r.name, err)
		}
		m, _ := meta.Accessor(plain(obj))
		if m.GetName() != "ubuntu-lts.worker" || m.GetAnnotations()[bashiblev1alpha1.ChecksumAnnotation] != sum("ab") {
			t.Errorf("%s/ubuntu-lts.worker: served as %q with checksum %q", r.name, m.GetName(), m.GetAnnotations()[bashiblev1alpha1.ChecksumAnnotation])
		}
		if got := r.payload(plain(obj)); got != wantPayload[r.name] {
			t.Errorf("%s/ubuntu-lts.worker serves %q, want the worker's", r.name, got)
		}
		// The legacy object is built per request: the canonical one keeps its name.
		canonical, err := f.storages[r.name].Get(as(admin), "worker", &metav1.GetOptions{})
		if m, _ := meta.Accessor(canonical); err != nil || m.GetName() != "worker" {
			t.Errorf("%s/worker after a legacy get: %v, %v", r.name, canonical, err)
		}
	}
}

func TestGetOfACanonicalNameIsEncodedOncePerVersion(t *testing.T) {
	f := setUp(t)
	s := f.storages["nodegroupbundles"]
	first, _ := s.Get(as(admin), "worker", &metav1.GetOptions{})
	again, _ := s.Get(as(admin), "worker", &metav1.GetOptions{})
	if _, ok := first.(runtime.CacheableObject); !ok || first != again {
		t.Fatalf("two gets of an unchanged group should serve the same cached object, got %T and %T", first, again)
	}
	changed := worker()
	changed.ResourceVersion = "20"
	f.source.groups["worker"] = changed
	if newer, _ := s.Get(as(admin), "worker", &metav1.GetOptions{}); newer == first {
		t.Error("a new resourceVersion should be served as a new object")
	}
}

func TestUnknownGroupIsNotFound(t *testing.T) {
	f := setUp(t)
	for _, r := range resources {
		for _, name := range []string{"no-such-group", "ubuntu-lts.no-such-group"} {
			_, err := f.storages[r.name].Get(as(admin), name, &metav1.GetOptions{})
			if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), name) {
				t.Errorf("%s/%s: want 404 naming it, got %v", r.name, name, err)
			}
		}
	}
}

func TestMalformedNameIsBadRequestSayingWhatAValidNameIs(t *testing.T) {
	f := setUp(t)
	for _, r := range resources {
		for _, bad := range []string{"Worker", "a.b.c", "-x", ".worker", strings.Repeat("a", 43)} {
			_, err := f.storages[r.name].Get(as(admin), bad, &metav1.GetOptions{})
			if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "a valid name is") {
				t.Errorf("%s/%q: want 400 saying what a valid name is, got %v", r.name, bad, err)
			}
		}
	}
}

func TestNodeIsRefusedAnotherGroupWithAClearError(t *testing.T) {
	f := setUp(t)
	for _, r := range resources {
		s := f.storages[r.name]
		if _, err := s.Get(as(nodeW1), "worker", &metav1.GetOptions{}); err != nil {
			t.Errorf("node w1 reading %s/worker, its own group: %v", r.name, err)
		}
		for _, name := range []string{"master", "ubuntu-lts.master", "no-such-group"} {
			_, err := s.Get(as(nodeW1), name, &metav1.GetOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `may read only node group "worker", not "`) {
				t.Errorf("node w1 reading %s/%s: want 403 naming its group, got %v", r.name, name, err)
			}
		}
	}
}

func TestBootstrapTokenIsRefusedAnotherGroup(t *testing.T) {
	f := setUp(t)
	for _, r := range resources {
		s := f.storages[r.name]
		if _, err := s.Get(as(masterToken), "master", &metav1.GetOptions{}); err != nil {
			t.Errorf("master's token reading %s/master: %v", r.name, err)
		}
		_, err := s.Get(as(masterToken), "worker", &metav1.GetOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `may read only node group "master", not "worker"`) {
			t.Errorf("master's token reading %s/worker: want 403, got %v", r.name, err)
		}
	}
}

func TestCallerTheNarrowerRefusesReadsNothing(t *testing.T) {
	f := setUp(t)
	s := f.storages["nodegroupbundles"]
	fresh := &user.DefaultInfo{Name: "system:node:fresh", Groups: []string{"system:nodes"}}
	if _, err := s.Get(as(fresh), "worker", &metav1.GetOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "has no Instance yet") {
		t.Errorf("get by a node without an Instance: want the narrower's 403, got %v", err)
	}
	if _, err := s.List(as(fresh), nil); !apierrors.IsForbidden(err) {
		t.Errorf("list by a node without an Instance: want 403, got %v", err)
	}
	if _, err := s.Watch(as(fresh), nil); !apierrors.IsForbidden(err) {
		t.Errorf("watch by a node without an Instance: want 403, got %v", err)
	}
	if _, err := s.Get(context.Background(), "worker", &metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get without a user: want 403, got %v", err)
	}
}

// names lists the object names of a list.
func names(t *testing.T, list runtime.Object) []string {
	t.Helper()
	objs, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, o := range objs {
		m, _ := meta.Accessor(o)
		out = append(out, m.GetName())
	}
	return out
}

func TestListIsNarrowedToTheCallersGroup(t *testing.T) {
	f := setUp(t)
	byName := func(s string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", s) }
	byType := func(s string) labels.Selector {
		return labels.SelectorFromSet(labels.Set{deckhousev1.NodeTypeLabel: s})
	}
	cases := []struct {
		name    string
		user    user.Info
		options *metainternalversion.ListOptions
		want    []string
	}{
		{"an administrator lists every group, sorted", admin, nil, []string{"master", "worker"}},
		{"a node lists its own group", nodeW1, nil, []string{"worker"}},
		{"a bootstrap token lists its own group", masterToken, nil, []string{"master"}},
		{"labels select", admin, &metainternalversion.ListOptions{LabelSelector: byType("Static")}, []string{"worker"}},
		{"metadata.name selects", admin, &metainternalversion.ListOptions{FieldSelector: byName("master")}, []string{"master"}},
		{"a selector never widens a node's scope", nodeW1, &metainternalversion.ListOptions{FieldSelector: byName("master")}, []string{}},
	}
	for _, r := range resources {
		for _, tc := range cases {
			list, err := f.storages[r.name].List(as(tc.user), tc.options)
			if err != nil {
				t.Fatalf("%s: %s: %v", r.name, tc.name, err)
			}
			if got := names(t, list); !slices.Equal(got, tc.want) {
				t.Errorf("%s: %s: got %v, want %v", r.name, tc.name, got, tc.want)
			}
			if rv := list.(metav1.ListInterface).GetResourceVersion(); rv != "12" {
				t.Errorf("%s: %s: list resourceVersion %q, want the source's 12", r.name, tc.name, rv)
			}
			// An empty list is "items": [], never null.
			if reflect.ValueOf(list).Elem().FieldByName("Items").IsNil() {
				t.Errorf("%s: %s: items is nil", r.name, tc.name)
			}
		}
	}
}

func TestUnsupportedFieldSelectorIsBadRequest(t *testing.T) {
	f := setUp(t)
	options := &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.x", "y")}
	for _, r := range resources {
		if _, err := f.storages[r.name].List(as(admin), options); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "only metadata.name is") {
			t.Errorf("%s list: want 400, got %v", r.name, err)
		}
		if _, err := f.storages[r.name].Watch(as(admin), options); !apierrors.IsBadRequest(err) {
			t.Errorf("%s watch: want 400, got %v", r.name, err)
		}
	}
}

func TestRequestsBeforeTheBundlesAreLoadedAreUnavailable(t *testing.T) {
	f := setUp(t)
	f.source.synced = false
	s := f.storages["bashibles"]
	_, getErr := s.Get(as(admin), "worker", &metav1.GetOptions{})
	_, listErr := s.List(as(admin), nil)
	_, watchErr := s.Watch(as(admin), nil)
	for verb, err := range map[string]error{"get": getErr, "list": listErr, "watch": watchErr} {
		if !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s before the bundles are loaded: want 503 (not a partial answer), got %v", verb, err)
		}
	}
}

// next returns a watch's next event, failing after a while.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch closed")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}
	return watch.Event{}
}

// expect checks an event's type, object name and resourceVersion.
func expect(t *testing.T, ev watch.Event, typ watch.EventType, name, rv string) {
	t.Helper()
	m, err := meta.Accessor(ev.Object)
	if err != nil || ev.Type != typ || m.GetName() != name || m.GetResourceVersion() != rv {
		t.Fatalf("want %s %s at %s, got %s %v", typ, name, rv, ev.Type, ev.Object)
	}
}

// changed is a bundle event of group at resourceVersion rv.
func changed(typ watch.EventType, p *bundles.Published, rv string) bundles.Event {
	p.ResourceVersion = rv
	return bundles.Event{Type: typ, Published: p}
}

func TestWatchFromAResourceVersionSendsOnlyLaterChanges(t *testing.T) {
	for _, r := range resources {
		t.Run(r.name, func(t *testing.T) {
			f := setUp(t)
			f.source.history = []bundles.Event{
				changed(watch.Modified, worker(), "11"),
				changed(watch.Modified, master(), "14"),
				changed(watch.Modified, worker(), "15"),
			}
			w, err := f.storages[r.name].Watch(as(admin), &metainternalversion.ListOptions{ResourceVersion: "14"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if want := []string{"14/false"}; !slices.Equal(f.source.watched, want) {
				t.Fatalf("the source was asked for %v, want %v", f.source.watched, want)
			}
			expect(t, next(t, w), watch.Modified, "worker", "15")
			f.source.send(changed(watch.Added, &bundles.Published{Group: "extra", NodeType: "Static", Checksum: sum("ef")}, "16"))
			ev := next(t, w)
			expect(t, ev, watch.Added, "extra", "16")
			if got, want := fmt.Sprintf("%T", plain(ev.Object)), fmt.Sprintf("%T", f.storages[r.name].New()); got != want {
				t.Errorf("event object %s, want %s", got, want)
			}
			f.source.send(changed(watch.Deleted, worker(), "17"))
			expect(t, next(t, w), watch.Deleted, "worker", "17")
		})
	}
}

func TestWatchIsNarrowedToTheCallersGroup(t *testing.T) {
	f := setUp(t)
	w, err := f.storages["nodegroupbundles"].Watch(as(nodeW1), &metainternalversion.ListOptions{ResourceVersion: "12"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	f.source.send(changed(watch.Modified, master(), "13"))
	f.source.send(changed(watch.Modified, worker(), "14"))
	expect(t, next(t, w), watch.Modified, "worker", "14")
}

func TestWatchersShareOneObjectPerEventEncodedOnce(t *testing.T) {
	for _, r := range resources {
		t.Run(r.name, func(t *testing.T) {
			f := setUp(t)
			var ws []watch.Interface
			for range 3 {
				w, err := f.storages[r.name].Watch(as(admin), &metainternalversion.ListOptions{ResourceVersion: "12"})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Stop()
				ws = append(ws, w)
			}
			current := worker()
			current.ResourceVersion = "13"
			f.source.groups["worker"] = current
			f.source.send(bundles.Event{Type: watch.Modified, Published: current})
			var objs []runtime.Object
			for _, w := range ws {
				ev := next(t, w)
				expect(t, ev, watch.Modified, "worker", "13")
				objs = append(objs, ev.Object)
			}
			co, ok := objs[0].(runtime.CacheableObject)
			if !ok {
				t.Fatalf("a watch event of the current version carries %T, want the shared runtime.CacheableObject", objs[0])
			}
			for _, o := range objs[1:] {
				if o != objs[0] {
					t.Fatal("watchers of one event got different objects: each would serialize it again")
				}
			}
			if got, _ := f.storages[r.name].Get(as(admin), "worker", &metav1.GetOptions{}); got != objs[0] {
				t.Error("a GET of the same version should serve the watchers' object")
			}
			encodes := 0
			for range objs {
				if err := co.CacheEncode("watch-json", func(runtime.Object, io.Writer) error { encodes++; return nil }, io.Discard); err != nil {
					t.Fatal(err)
				}
			}
			if encodes != 1 {
				t.Errorf("the event was encoded %d times for %d watchers, want once", encodes, len(objs))
			}

			// A watcher replaying history gets an older version built for
			// it alone; the current one stays cached.
			old, err := f.storages[r.name].Watch(as(admin), &metainternalversion.ListOptions{ResourceVersion: "12"})
			if err != nil {
				t.Fatal(err)
			}
			defer old.Stop()
			f.source.send(changed(watch.Modified, worker(), "11"))
			if ev := next(t, old); ev.Object == objs[0] {
				t.Error("an older version was served as the current shared object")
			}
			if got, _ := f.storages[r.name].Get(as(admin), "worker", &metav1.GetOptions{}); got != objs[0] {
				t.Error("an older version displaced the current shared object")
			}
		})
	}
}

func TestWatchFromBeforeTheHistoryIsGone(t *testing.T) {
	f := setUp(t)
	f.source.floor = 10
	for _, r := range resources {
		_, err := f.storages[r.name].Watch(as(admin), &metainternalversion.ListOptions{ResourceVersion: "1"})
		var status apierrors.APIStatus
		if !apierrors.IsResourceExpired(err) || !errors.As(err, &status) || status.Status().Code != http.StatusGone {
			t.Errorf("%s: a watch from before the history: want 410 Gone, got %v", r.name, err)
		}
	}
}

func TestWatchWithInitialEventsSendsTheStateThenABookmark(t *testing.T) {
	f := setUp(t)
	yes := true
	w, err := f.storages["bootstrap"].Watch(as(masterToken), &metainternalversion.ListOptions{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersion: "5"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if want := []string{"5/true"}; !slices.Equal(f.source.watched, want) {
		t.Fatalf("the source was asked for %v, want %v", f.source.watched, want)
	}
	expect(t, next(t, w), watch.Added, "master", "12")
	ev := next(t, w)
	b, ok := ev.Object.(*bashiblev1alpha1.Bootstrap)
	if ev.Type != watch.Bookmark || !ok || b.ResourceVersion != "12" || b.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("want a Bootstrap bookmark at 12 ending the initial events, got %s %#v", ev.Type, ev.Object)
	}
}

// TestWatchWithoutBookmarksGetsNoBookmark: a watch without a
// resourceVersion reaches the storage as k8s.io/apiserver defaults it,
// with sendInitialEvents and without allowWatchBookmarks. It gets the
// current state and then the changes, and no bookmark, which the
// apiserver's watch handler would fail on (it panics, ending the stream).
func TestWatchWithoutBookmarksGetsNoBookmark(t *testing.T) {
	for _, r := range resources {
		t.Run(r.name, func(t *testing.T) {
			f := setUp(t)
			options := &metainternalversion.ListOptions{Watch: true}
			metainternalversion.SetListOptionsDefaults(options, true)
			if options.SendInitialEvents == nil || !*options.SendInitialEvents || options.AllowWatchBookmarks {
				t.Fatalf("the apiserver's defaults changed: %+v", options)
			}
			w, err := f.storages[r.name].Watch(as(nodeW1), options)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			expect(t, next(t, w), watch.Added, "worker", "10")
			current := worker()
			current.ResourceVersion = "13"
			f.source.groups["worker"] = current
			f.source.send(bundles.Event{Type: watch.Modified, Published: current})
			expect(t, next(t, w), watch.Modified, "worker", "13")
		})
	}
}

func TestStoppedWatchStopsItsSubscription(t *testing.T) {
	f := setUp(t)
	w, err := f.storages["bashibles"].Watch(as(admin), nil)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, next(t, w), watch.Added, "master", "12")
	w.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for !f.source.allStopped() {
		if time.Now().After(deadline) {
			t.Fatal("the source's subscription was not stopped with the watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range w.ResultChan() {
	}
}

// seat is the signal API Priority and Fairness waits on before it gives
// a watch's seat back (see filters.WithPriorityAndFairness).
type seat struct{ released chan struct{} }

func (s *seat) Signal() {
	select {
	case <-s.released:
	default:
		close(s.released)
	}
}

func (s *seat) Wait() { <-s.released }

// TestWatchGivesBackItsPriorityAndFairnessSeat: APF counts a watch against
// its priority level until the storage signals that the watch is set up;
// one that never signals holds the seat while it is open, and a few
// hundred watching nodes then fill the level (HTTP 429 for every further
// request of every node).
func TestWatchGivesBackItsPriorityAndFairnessSeat(t *testing.T) {
	for _, r := range resources {
		t.Run(r.name, func(t *testing.T) {
			f := setUp(t)
			s := &seat{released: make(chan struct{})}
			ctx := utilflowcontrol.WithInitializationSignal(as(admin), s)
			w, err := f.storages[r.name].Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: "12"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			select {
			case <-s.released:
			default:
				t.Fatal("the watch is set up but holds its API Priority and Fairness seat: call flowcontrol.WatchInitialized")
			}
			f.source.send(changed(watch.Modified, worker(), "13"))
			expect(t, next(t, w), watch.Modified, "worker", "13")
		})
	}
}

func TestTableRowsShowTypeChecksumStepsSizeAndAge(t *testing.T) {
	f := setUp(t)
	wantColumns := []string{"Name", "Type", "Checksum", "Revision", "Steps", "Size", "Age", "Kubernetes/1", "CRI/1", "Full-Checksum/1"}
	for _, r := range resources {
		s := f.storages[r.name]
		obj, err := s.Get(as(admin), "worker", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		table, err := s.ConvertToTable(context.Background(), obj, nil)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		var columns []string
		for _, c := range table.ColumnDefinitions {
			if c.Priority > 0 {
				c.Name += "/1"
			}
			columns = append(columns, c.Name)
		}
		if !slices.Equal(columns, wantColumns) {
			t.Errorf("%s columns %v, want %v (/1: -o wide only)", r.name, columns, wantColumns)
		}
		want := []any{"worker", "Static", sum("ab")[:12], "-", r.steps, r.size, "3d", "1.36", "Containerd", sum("ab")}
		if len(table.Rows) != 1 || !slices.Equal(table.Rows[0].Cells, want) {
			t.Errorf("%s row %v, want %v", r.name, table.Rows, want)
		}

		list, err := s.List(as(admin), nil)
		if err != nil {
			t.Fatal(err)
		}
		table, err = s.ConvertToTable(context.Background(), list, nil)
		if err != nil {
			t.Fatalf("%s list: %v", r.name, err)
		}
		if table.ResourceVersion != "12" || len(table.Rows) != 2 || table.Rows[0].Cells[0] != "master" || table.Rows[1].Cells[0] != "worker" {
			t.Errorf("%s list table: resourceVersion %q, rows %v", r.name, table.ResourceVersion, table.Rows)
		}
		if _, err := s.ConvertToTable(context.Background(), &metav1.Status{}, nil); err == nil {
			t.Errorf("%s: printing an object of another type should fail", r.name)
		}
	}
}

func TestHumanSizes(t *testing.T) {
	for n, want := range map[int]string{0: "0B", 1023: "1023B", 1024: "1.0Ki", 1536: "1.5Ki", 3 << 20: "3.0Mi"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
	if got := age(metav1.Time{}); got != "<unknown>" {
		t.Errorf("age of no time = %q", got)
	}
}

func TestRequestsAreCountedByResourceAndVerb(t *testing.T) {
	f := setUp(t)
	s := f.storages["nodegroupbundles"]
	_, _ = s.Get(as(admin), "worker", &metav1.GetOptions{})
	_, _ = s.Get(as(admin), "no-such-group", &metav1.GetOptions{})
	_, _ = s.List(as(admin), nil)
	w, err := f.storages["bootstrap"].Watch(as(admin), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	want := `
# HELP bashible_apiserver_requests_total Requests served, by resource and verb.
# TYPE bashible_apiserver_requests_total counter
bashible_apiserver_requests_total{resource="bootstrap",verb="watch"} 1
bashible_apiserver_requests_total{resource="nodegroupbundles",verb="get"} 2
bashible_apiserver_requests_total{resource="nodegroupbundles",verb="list"} 1
`
	if err := testutil.CollectAndCompare(f.metrics.Requests, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
