package crdmigration

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
)

// crdOf is the CRD of plural (kind) in group, served at versions, with
// storage the storage version and stored its status.storedVersions.
func crdOf(group, plural, kind string, versions []string, storage string, stored ...string) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: stored},
	}
	for _, v := range versions {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true, Storage: v == storage})
	}
	return c
}

func crd(group string, storage string, stored ...string) *apiextensionsv1.CustomResourceDefinition {
	return crdOf(group, "nodegroups", "NodeGroup", []string{"v1alpha1", "v1alpha2", "v1"}, storage, stored...)
}

func unstructuredOf(t *testing.T, c *apiextensionsv1.CustomResourceDefinition) *unstructured.Unstructured {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

func metaScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// syncOnly is a controller that migrates the CRDs given, from an indexer
// holding them, without informers.
func syncOnly(t *testing.T, d *manager.Deps, crds ...*unstructured.Unstructured) *Controller {
	t.Helper()
	ctl := &Controller{d: d, enabled: true, fieldManager: Name, crds: map[string]cache.GenericLister{}}
	for _, c := range crds {
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		if err := indexer.Add(c); err != nil {
			t.Fatal(err)
		}
		ctl.crds[c.GetName()] = cache.NewGenericLister(indexer, crdsResource.GroupResource())
	}
	ctl.queue = loop.New(Name, nil, ctl.sync)
	return ctl
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crd     *apiextensionsv1.CustomResourceDefinition
		storage string
		stale   []string
	}{
		{"stored at older versions", crd("deckhouse.io", "v1", "v1alpha1", "v1alpha2", "v1"), "v1", []string{"v1alpha1", "v1alpha2"}},
		{"only the storage version", crd("deckhouse.io", "v1", "v1"), "v1", nil},
		{"another group is not ours", crd("example.io", "v1", "v1alpha1", "v1"), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storage, stale := Plan(tc.crd)
			if storage != tc.storage || !slices.Equal(stale, tc.stale) {
				t.Errorf("Plan: %q %v, want %q %v", storage, stale, tc.storage, tc.stale)
			}
		})
	}
}

// A CRD whose storedVersions lists older versions: each object is written
// with an empty patch at the storage version, through the metadata client
// (its content is never read), and then storedVersions becomes the storage
// version alone, tested against what was read.
func TestSyncRewritesEveryObjectThenStoredVersions(t *testing.T) {
	c := crd("deckhouse.io", "v1", "v1alpha1", "v1")
	crdObj := unstructuredOf(t, c)
	gvr := schema.GroupVersionResource{Group: "deckhouse.io", Version: "v1", Resource: "nodegroups"}
	var objs []runtime.Object
	for _, name := range []string{"worker", "master", "front"} {
		objs = append(objs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "deckhouse.io/v1", Kind: "NodeGroup"},
			ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	meta := metadatafake.NewSimpleMetadataClient(metaScheme(t), objs...)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), crdObj)
	ctl := syncOnly(t, &manager.Deps{Dynamic: dyn, Metadata: meta}, crdObj)
	if err := ctl.sync(context.Background(), c.Name); err != nil {
		t.Fatal(err)
	}

	var patched []string
	for _, a := range meta.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			if p.GetResource() != gvr || string(p.GetPatch()) != "{}" {
				t.Errorf("patched %v with %s, want an empty patch at %v", p.GetResource(), p.GetPatch(), gvr)
			}
			patched = append(patched, p.GetName())
		}
		if a.GetVerb() == "get" {
			t.Errorf("read an object (%v): only metadata lists are needed", a)
		}
	}
	slices.Sort(patched)
	if !slices.Equal(patched, []string{"front", "master", "worker"}) {
		t.Errorf("rewrote %v, want every object", patched)
	}
	var status []clienttesting.PatchAction
	for _, a := range dyn.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			status = append(status, p)
		}
	}
	if len(status) != 1 || status[0].GetSubresource() != "status" || status[0].GetName() != c.Name {
		t.Fatalf("CRD patches %v, want one of %s's status", status, c.Name)
	}
	var ops []map[string]any
	if err := json.Unmarshal(status[0].GetPatch(), &ops); err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"test","path":"/status/storedVersions","value":["v1alpha1","v1"]},{"op":"replace","path":"/status/storedVersions","value":["v1"]}]`
	if string(status[0].GetPatch()) != want {
		t.Errorf("status patch %s, want %s", status[0].GetPatch(), want)
	}
}

// A CRD with nothing to migrate is left alone.
func TestSyncLeavesAMigratedCRDAlone(t *testing.T) {
	crdObj := unstructuredOf(t, crd("deckhouse.io", "v1", "v1"))
	meta := metadatafake.NewSimpleMetadataClient(metaScheme(t))
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), crdObj)
	ctl := syncOnly(t, &manager.Deps{Dynamic: dyn, Metadata: meta}, crdObj)
	if err := ctl.sync(context.Background(), crdObj.GetName()); err != nil {
		t.Fatal(err)
	}
	if len(meta.Actions())+len(dyn.Actions()) != 0 {
		t.Errorf("acted on a migrated CRD: %v %v", meta.Actions(), dyn.Actions())
	}
}

// The resource sets: every deckhouse.io kind served at several versions is
// migrated by exactly one binary, and SSHCredentials by
// caps-controller-manager, the only identity that may read them.
func TestEachKindHasOneMigrator(t *testing.T) {
	all := append(slices.Clone(NodeManagerControllerResources), CAPSControllerManagerResources...)
	slices.Sort(all)
	if !slices.Equal(all, slices.Compact(slices.Clone(all))) {
		t.Errorf("a kind is migrated by both binaries: %v and %v", NodeManagerControllerResources, CAPSControllerManagerResources)
	}
	for _, r := range []string{"sshcredentials", "staticinstances"} {
		if slices.Contains(NodeManagerControllerResources, r) || !slices.Contains(CAPSControllerManagerResources, r) {
			t.Errorf("%s: migrated by node-manager-controller (%v) or not by caps-controller-manager (%v); they are CAPS's, and SSHCredentials hold private keys",
				r, NodeManagerControllerResources, CAPSControllerManagerResources)
		}
	}
	if got := CRDName("sshcredentials"); got != "sshcredentials."+deckhousev1.GroupName {
		t.Errorf("CRDName: %s", got)
	}
}

// TestEachBinaryMigratesItsOwnKindsOnly runs the controller as each binary
// wires it, against a cluster where every deckhouse.io CRD has objects
// stored at an older version: caps-controller-manager's rewrites the
// SSHCredentials and StaticInstances and sets their CRDs' storedVersions,
// and lists, patches and watches nothing of node-manager-controller's
// kinds; node-manager-controller's the converse. Each watches only its own
// CRDs, by name (the field selector its RBAC's resourceNames need).
func TestEachBinaryMigratesItsOwnKindsOnly(t *testing.T) {
	type kind struct {
		plural, kind, storage string
		versions              []string
	}
	kinds := []kind{
		{"nodegroups", "NodeGroup", "v1", []string{"v1alpha1", "v1alpha2", "v1"}},
		{"instances", "Instance", "v1alpha1", []string{"v1alpha1", "v1alpha2"}},
		{"nodeusers", "NodeUser", "v1", []string{"v1alpha1", "v1"}},
		{"sshcredentials", "SSHCredentials", "v1alpha2", []string{"v1alpha1", "v1alpha2"}},
		{"staticinstances", "StaticInstance", "v1alpha2", []string{"v1alpha1", "v1alpha2"}},
	}
	for _, binary := range []struct {
		name      string
		resources []string
	}{
		{deckhousev1.CAPSControllerManagerName, CAPSControllerManagerResources},
		{deckhousev1.NodeManagerControllerName, NodeManagerControllerResources},
	} {
		t.Run(binary.name, func(t *testing.T) {
			var crds []runtime.Object
			meta := metadatafake.NewSimpleMetadataClient(metaScheme(t))
			for _, k := range kinds {
				crds = append(crds, unstructuredOf(t, crdOf(deckhousev1.GroupName, k.plural, k.kind, k.versions, k.storage, k.versions...)))
				gvr := schema.GroupVersionResource{Group: deckhousev1.GroupName, Version: k.storage, Resource: k.plural}
				obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: gvr.GroupVersion().String(), Kind: k.kind},
					ObjectMeta: metav1.ObjectMeta{Name: "old-" + k.plural}}
				if err := meta.Tracker().Create(gvr, obj, ""); err != nil {
					t.Fatal(err)
				}
			}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{crdsResource: "CustomResourceDefinitionList"}, crds...)
			opts := manager.NewOptions()
			opts.Component = binary.name
			ctl := New(&manager.Deps{Dynamic: dyn, Metadata: meta, Options: opts}, binary.resources)
			if ctl.fieldManager != binary.name {
				t.Errorf("field manager %q, want the component's name %q", ctl.fieldManager, binary.name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan struct{})
			go func() { defer close(done); ctl.Run(ctx, 1) }()

			// Wait until each of its CRDs has storedVersions at the storage
			// version alone.
			var want []string
			for _, r := range binary.resources {
				want = append(want, CRDName(r))
			}
			migrated := func() []string {
				var out []string
				for _, a := range dyn.Actions() {
					if p, ok := a.(clienttesting.PatchAction); ok && p.GetSubresource() == "status" {
						out = append(out, p.GetName())
					}
				}
				// A sync that ran before the informer saw its own status
				// patch migrates the CRD again, harmlessly: the names count,
				// not how often.
				slices.Sort(out)
				return slices.Compact(out)
			}
			slices.Sort(want)
			if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
				return slices.Equal(migrated(), want), nil
			}); err != nil {
				t.Fatalf("CRDs whose storedVersions were set: %v, want %v (%v)", migrated(), want, err)
			}
			cancel()
			<-done

			var rewritten []string
			for _, a := range meta.Actions() {
				r := a.GetResource().Resource
				if !slices.Contains(binary.resources, r) {
					t.Errorf("%s %s %s: not one of its kinds %v", a.GetVerb(), r, a.GetResource().Version, binary.resources)
				}
				if p, ok := a.(clienttesting.PatchAction); ok {
					rewritten = append(rewritten, r)
					if string(p.GetPatch()) != "{}" {
						t.Errorf("patched %s %s with %s, want an empty patch", r, p.GetName(), p.GetPatch())
					}
				}
			}
			slices.Sort(rewritten)
			rewritten = slices.Compact(rewritten)
			wantRewritten := slices.Sorted(slices.Values(binary.resources))
			if !slices.Equal(rewritten, wantRewritten) {
				t.Errorf("rewrote objects of %v, want each of %v", rewritten, wantRewritten)
			}
			if got := migrated(); !slices.Equal(got, want) {
				t.Errorf("set storedVersions of %v, want %v only", got, want)
			}
			for _, a := range dyn.Actions() {
				if a.GetVerb() != "list" && a.GetVerb() != "watch" {
					continue
				}
				var fields string
				switch l := a.(type) {
				case clienttesting.ListActionImpl:
					fields = l.GetListRestrictions().Fields.String()
				case clienttesting.WatchActionImpl:
					fields = l.GetWatchRestrictions().Fields.String()
				}
				name, ok := fieldName(fields)
				if !ok || !slices.Contains(want, name) {
					t.Errorf("%s of CRDs with field selector %q, want one of its own CRDs %v by name", a.GetVerb(), fields, want)
				}
			}
		})
	}
}

// fieldName is the name a field selector metadata.name=<name> selects.
func fieldName(selector string) (string, bool) {
	const prefix = "metadata.name="
	if len(selector) <= len(prefix) || selector[:len(prefix)] != prefix {
		return "", false
	}
	return selector[len(prefix):], true
}

// A sync that runs again before the informer has seen the controller's
// own status patch (the cache still holds the CRD it migrated from) does
// not rewrite every object a second time; a CRD changed since (another
// resourceVersion still listing an older version) is migrated again.
func TestSyncDoesNotMigrateTheSameCRDTwice(t *testing.T) {
	c := crd("deckhouse.io", "v1", "v1alpha1", "v1")
	c.ResourceVersion = "10"
	crdObj := unstructuredOf(t, c)
	meta := metadatafake.NewSimpleMetadataClient(metaScheme(t), &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "deckhouse.io/v1", Kind: "NodeGroup"}, ObjectMeta: metav1.ObjectMeta{Name: "worker"}})
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), crdObj)
	ctl := syncOnly(t, &manager.Deps{Dynamic: dyn, Metadata: meta}, crdObj)
	rewrites := func() int {
		n := 0
		for _, a := range meta.Actions() {
			if _, ok := a.(clienttesting.PatchAction); ok {
				n++
			}
		}
		return n
	}
	for range 2 {
		if err := ctl.sync(context.Background(), c.Name); err != nil {
			t.Fatal(err)
		}
	}
	if n := rewrites(); n != 1 {
		t.Fatalf("two syncs of the same cached CRD rewrote %d objects, want 1", n)
	}
	changed := c.DeepCopy()
	changed.ResourceVersion = "12"
	changedObj := unstructuredOf(t, changed)
	// Someone stored objects at an older version again.
	ctl = syncOnlyWith(t, ctl, &manager.Deps{Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), changedObj), Metadata: meta}, changedObj)
	if err := ctl.sync(context.Background(), c.Name); err != nil {
		t.Fatal(err)
	}
	if n := rewrites(); n != 2 {
		t.Errorf("a CRD at a new resourceVersion listing an older version again: %d rewrites in all, want 2", n)
	}
}

// syncOnlyWith is ctl with clients d, reading crds from a new indexer,
// keeping what it remembers.
func syncOnlyWith(t *testing.T, ctl *Controller, d *manager.Deps, crds ...*unstructured.Unstructured) *Controller {
	t.Helper()
	next := syncOnly(t, d, crds...)
	next.migrated = ctl.migrated
	return next
}
