package conversion

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// TestAForgedConversionDataIsIgnored: whoever writes an object at an older
// version also writes its annotations, so what the conversion-data
// annotation brings back must pass the storage version's schema, as a write
// at that version would; a forged value (here a watchdog timeout that is no
// duration) is dropped, on the path where the older version's fields are
// unchanged and on the path where they were edited.
func TestAForgedConversionDataIsIgnored(t *testing.T) {
	ng, err := For(schema.GroupKind{Group: deckhousev1.GroupName, Kind: "NodeGroup"})
	if err != nil {
		t.Fatal(err)
	}
	hub := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: workers}
spec:
  nodeType: Static
  fencing: {mode: Watchdog, watchdog: {timeout: 60s}}
`), &hub.Object); err != nil {
		t.Fatal(err)
	}
	for _, edited := range []bool{false, true} {
		old, err := ng.Convert(hub, "v1alpha2")
		if err != nil {
			t.Fatal(err)
		}
		data := old.GetAnnotations()[deckhousev1.ConversionDataAnnotation]
		if data == "" {
			t.Fatal("v1 fencing went down to v1alpha2 without the conversion-data annotation")
		}
		saved := map[string]any{}
		if err := json.Unmarshal([]byte(data), &saved); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(saved, "1d; reboot", "spec", "fencing", "watchdog", "timeout"); err != nil {
			t.Fatal(err)
		}
		forged, _ := json.Marshal(saved)
		old.SetAnnotations(map[string]string{deckhousev1.ConversionDataAnnotation: string(forged)})
		if edited {
			if err := unstructured.SetNestedField(old.Object, map[string]any{"role": "w"}, "spec", "nodeTemplate", "labels"); err != nil {
				t.Fatal(err)
			}
		}
		up, err := ng.Convert(old, "v1")
		if err != nil {
			t.Fatal(err)
		}
		if timeout, _, _ := unstructured.NestedString(up.Object, "spec", "fencing", "watchdog", "timeout"); timeout == "1d; reboot" {
			t.Errorf("edited at v1alpha2: %v: the forged watchdog timeout %q reached v1, which its schema refuses", edited, timeout)
		}
		if _, ok := up.GetAnnotations()[deckhousev1.ConversionDataAnnotation]; ok {
			t.Error("the annotation is kept at v1")
		}
	}
}
