package corpus

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// versioned is one object of testdata/versions: a Deckhouse-documented
// object at the version its page wrote it.
type versioned struct {
	File   string
	Object *unstructured.Unstructured
}

// loadVersioned reads testdata/versions: each file a header of comment
// lines naming its source, then YAML documents of deckhouse.io kinds.
func loadVersioned(dir string) ([]versioned, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no objects in %s: %v", dir, err)
	}
	slices.Sort(files)
	var out []versioned
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if !bytes.HasPrefix(data, []byte("# Source: ")) {
			return nil, fmt.Errorf("%s: the file must start with a header naming its source (# Source: ...)", file)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
			}
			if obj == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GroupVersionKind().Group != deckhousev1.GroupName {
				return nil, fmt.Errorf("%s: document %d is %s, not of %s", file, i+1, u.GetAPIVersion(), deckhousev1.GroupName)
			}
			out = append(out, versioned{File: filepath.Base(file), Object: u})
		}
	}
	return out, nil
}

// crdVersions are the served versions of each deckhouse.io kind, read from
// its CRD, and its plural.
type crdVersions struct {
	Plural string
	Served []string
}

func deckhouseCRDs(ctx context.Context, dyn dynamic.Interface) (map[string]crdVersions, error) {
	list, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]crdVersions{}
	for _, crd := range list.Items {
		if g, _, _ := unstructured.NestedString(crd.Object, "spec", "group"); g != deckhousev1.GroupName {
			continue
		}
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		c := crdVersions{Plural: plural}
		for _, v := range versions {
			m, _ := v.(map[string]any)
			if served, _ := m["served"].(bool); served {
				c.Served = append(c.Served, m["name"].(string))
			}
		}
		out[kind] = c
	}
	return out, nil
}

// TestDocumentedObjectsReadAtEveryVersion: each object Deckhouse's
// documentation writes at an older or the current version
// (testdata/versions) is created at that version and read at every version
// its CRD serves, through the conversion webhook bashible-apiserver serves;
// read back at its own version it holds what was written (a round trip
// through the storage version loses nothing). An object whose version the
// CRD does not serve yet is skipped and counted.
func TestDocumentedObjectsReadAtEveryVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	objs, err := loadVersioned(filepath.Join("testdata", "versions"))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(f.CP.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds, err := deckhouseCRDs(ctx, dyn)
	if err != nil {
		t.Fatal(err)
	}
	created, reads, skipped := 0, 0, 0
	var refused []string
	for _, v := range objs {
		obj := v.Object.DeepCopy()
		gvk := obj.GroupVersionKind()
		crd, ok := crds[gvk.Kind]
		if !ok || !slices.Contains(crd.Served, gvk.Version) {
			t.Logf("%s: %s %s skipped: CRD serves %v", v.File, obj.GetAPIVersion(), gvk.Kind, crd.Served)
			skipped++
			continue
		}
		// Apart from the corpus's objects of the same published name.
		obj.SetName("v-" + gvk.Version + "-" + obj.GetName())
		where := fmt.Sprintf("%s: %s %s %s", v.File, obj.GetAPIVersion(), gvk.Kind, obj.GetName())
		res := func(version string) dynamic.ResourceInterface {
			return dyn.Resource(schema.GroupVersionResource{Group: gvk.Group, Version: version, Resource: crd.Plural})
		}
		// The CRDs were pointed at the replica just before the suite's
		// tests: kube-apiserver takes a moment to use a changed CRD.
		var createErr error
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, createErr = res(gvk.Version).Create(ctx, obj, metav1.CreateOptions{})
			return createErr == nil || !strings.Contains(createErr.Error(), "conversion webhook"), nil
		})
		if createErr != nil {
			t.Errorf("%s: refused: %v", where, createErr)
			refused = append(refused, where)
			continue
		}
		created++
		t.Cleanup(func() {
			if err := res(gvk.Version).Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("%s: delete: %v", where, err)
			}
		})
		for _, version := range crd.Served {
			got, err := res(version).Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Errorf("%s: read at %s: %v", where, version, err)
				continue
			}
			reads++
			if got.GetAPIVersion() != (schema.GroupVersion{Group: gvk.Group, Version: version}).String() || got.GetKind() != gvk.Kind {
				t.Errorf("%s: read at %s answered %s %s", where, version, got.GetAPIVersion(), got.GetKind())
			}
			if version != gvk.Version {
				continue
			}
			// What was written is there as written (defaults may add).
			if path, diff := subset(v.Object.Object["spec"], got.Object["spec"], "spec"); diff != "" {
				t.Errorf("%s: read back at its own version, %s %s", where, path, diff)
			}
		}
	}
	t.Logf("documented objects at their own versions: %d created and read at %d served versions in all, %d skipped (version not served), %d refused %v",
		created, reads, skipped, len(refused), refused)
	if created == 0 && skipped == 0 {
		t.Fatal("nothing was created")
	}
}

// subset reports the first place where want (what was written) is not in
// got (what was read): a missing or different value.
func subset(want, got any, path string) (string, string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, fmt.Sprintf("is %T, want an object", got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return path + "." + k, "is missing"
			}
			if p, d := subset(wv, gv, path+"."+k); d != "" {
				return p, d
			}
		}
		return "", ""
	default:
		// JSON numbers come back as int64 or float64 alike.
		if fmt.Sprint(want) == fmt.Sprint(got) || reflect.DeepEqual(want, got) {
			return "", ""
		}
		return path, fmt.Sprintf("is %v, want %v", got, want)
	}
}
