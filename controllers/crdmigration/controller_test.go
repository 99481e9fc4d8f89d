package crdmigration

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
)

func crd(group string, storage string, stored ...string) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "nodegroups." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "nodegroups", Kind: "NodeGroup"}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: stored},
	}
	for _, v := range []string{"v1alpha1", "v1alpha2", "v1"} {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true, Storage: v == storage})
	}
	return c
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
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	if err != nil {
		t.Fatal(err)
	}
	crdObj := &unstructured.Unstructured{Object: u}

	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "deckhouse.io", Version: "v1", Resource: "nodegroups"}
	var objs []runtime.Object
	for _, name := range []string{"worker", "master", "front"} {
		objs = append(objs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "deckhouse.io/v1", Kind: "NodeGroup"},
			ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), crdObj)

	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(crdObj); err != nil {
		t.Fatal(err)
	}
	d := &manager.Deps{Dynamic: dyn, Metadata: meta}
	ctl := &Controller{d: d, enabled: true, crds: cache.NewGenericLister(indexer, crdsResource.GroupResource())}
	ctl.queue = loop.New(Name, nil, ctl.sync)
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
	c := crd("deckhouse.io", "v1", "v1")
	u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	crdObj := &unstructured.Unstructured{Object: u}
	scheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(scheme)
	meta := metadatafake.NewSimpleMetadataClient(scheme)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), crdObj)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = indexer.Add(crdObj)
	ctl := &Controller{d: &manager.Deps{Dynamic: dyn, Metadata: meta}, enabled: true, crds: cache.NewGenericLister(indexer, crdsResource.GroupResource())}
	if err := ctl.sync(context.Background(), c.Name); err != nil {
		t.Fatal(err)
	}
	if len(meta.Actions())+len(dyn.Actions()) != 0 {
		t.Errorf("acted on a migrated CRD: %v %v", meta.Actions(), dyn.Actions())
	}
}
