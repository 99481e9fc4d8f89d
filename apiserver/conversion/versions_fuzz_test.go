package conversion

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/randfill"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// fuzzIterations is how many random objects each round-trip test converts.
const fuzzIterations = 3000

// fuzzSeed makes every run convert the same objects, so a failure repeats.
const fuzzSeed = 36

// fuzzFiller fills the fields the kinds share: times at whole seconds (as
// the API serializes them) and conditions with one entry per type, as
// their list-map schema requires. Each kind adds its own funcs.
func fuzzFiller(funcs ...any) *randfill.Filler {
	base := []any{
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.Unix(c.Int63n(4_000_000_000), 0).Rfc3339Copy()
		},
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			*m = metav1.ObjectMeta{Name: "obj-" + strings.ToLower(fuzzWord(c, 8))}
			if c.Intn(3) == 0 {
				m.Annotations = map[string]string{"example.com/note": c.String(20)}
			}
		},
		func(cs *[]metav1.Condition, c randfill.Continue) {
			*cs = nil
			for i, typ := range []string{"BashibleReady", "WaitingApproval", "Bootstrapped", "CredentialsReady"} {
				if c.Intn(2) == 0 {
					continue
				}
				var t metav1.Time
				c.Fill(&t)
				*cs = append(*cs, metav1.Condition{
					Type: typ, Status: fuzzPick(c, metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown),
					ObservedGeneration: int64(i) * c.Int63n(10), LastTransitionTime: t,
					Reason: "Reason" + fuzzWord(c, 6), Message: c.String(40),
				})
			}
		},
	}
	return randfill.NewWithSeed(fuzzSeed).NilChance(0.3).NumElements(0, 3).Funcs(append(base, funcs...)...)
}

func fuzzPick[T any](c randfill.Continue, values ...T) T {
	return values[c.Intn(len(values))]
}

// fuzzWord is n letters or fewer, at least one.
func fuzzWord(c randfill.Continue, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, 1+c.Intn(n))
	for i := range b {
		b[i] = letters[c.Intn(len(letters))]
	}
	return string(b)
}

// fuzzObject is typed, a filled object of gvk, as kube-apiserver sends it
// to the conversion webhook (JSON: what runtime.DefaultUnstructuredConverter
// makes of it).
func fuzzObject(t *testing.T, typed runtime.Object, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		t.Fatal(err)
	}
	content["apiVersion"], content["kind"] = gvk.GroupVersion().String(), gvk.Kind
	// Through JSON, as the webhook receives it (numbers become int64 or
	// float64, nothing typed survives).
	data, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return obj
}

// convert converts obj with k to version to, failing the test on an error.
func convert(t *testing.T, k Kind, obj *unstructured.Unstructured, to string) *unstructured.Unstructured {
	t.Helper()
	out, err := k.Convert(obj, to)
	if err != nil {
		t.Fatalf("converting %s to %s: %v\nobject: %v", obj.GetAPIVersion(), to, err, obj.Object)
	}
	if got := out.GetAPIVersion(); got != k.GroupKind.Group+"/"+to {
		t.Fatalf("converted to %s: apiVersion is %s", to, got)
	}
	return out
}

// requireEqual fails when got is not want, showing both as JSON.
func requireEqual(t *testing.T, what string, got, want *unstructured.Unstructured) {
	t.Helper()
	if !reflect.DeepEqual(got.Object, want.Object) {
		g, _ := json.Marshal(got.Object)
		w, _ := json.Marshal(want.Object)
		t.Fatalf("%s:\n got: %s\nwant: %s", what, g, w)
	}
}

func hasConversionData(obj *unstructured.Unstructured) bool {
	_, ok := obj.GetAnnotations()[deckhousev1.ConversionDataAnnotation]
	return ok
}

// TestKindsRegistered: every kind of these files is served through Kinds.
func TestKindsRegistered(t *testing.T) {
	for _, k := range []Kind{sshCredentials, staticInstance, nodeUser, instance} {
		got, err := For(k.GroupKind)
		if err != nil {
			t.Fatal(err)
		}
		if got.Hub != k.Hub || len(got.Spokes) != len(k.Spokes) {
			t.Errorf("%s: Kinds holds hub %s with %d spokes, want %s with %d", k.GroupKind, got.Hub, len(got.Spokes), k.Hub, len(k.Spokes))
		}
	}
}
