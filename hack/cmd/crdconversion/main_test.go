package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/conversion"
)

func crdYAML(versions ...string) []byte {
	var b strings.Builder
	b.WriteString(`---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.20.0
  name: widgets.deckhouse.io
spec:
  group: deckhouse.io
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  scope: Cluster
  versions:
`)
	for i, v := range versions {
		fmt.Fprintf(&b, "  - name: %s\n    schema:\n      openAPIV3Schema:\n        type: object\n    served: true\n    storage: %v\n", v, i == 0)
	}
	return []byte(b.String())
}

func widgetKinds(gk schema.GroupKind) (conversion.Kind, error) {
	if gk.Kind != "Widget" {
		return conversion.Kind{}, fmt.Errorf("no conversions for %s", gk)
	}
	return conversion.Kind{GroupKind: gk, Hub: "v2", Spokes: map[string]conversion.Spoke{"v1": {}}}, nil
}

func TestProcessAddsTheWebhookWhereSeveralVersionsAreServed(t *testing.T) {
	out, err := Process(crdYAML("v2", "v1"), widgetKinds)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(out, crd); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(crd.Spec.Conversion, conversion.CRDConversion()) {
		t.Errorf("conversion %+v, want %+v", crd.Spec.Conversion, conversion.CRDConversion())
	}
	cc := crd.Spec.Conversion.Webhook.ClientConfig
	if s := cc.Service; s.Name != bashiblev1alpha1.ConversionServiceName || s.Namespace != deckhousev1.Namespace || *s.Port != 443 || *s.Path != bashiblev1alpha1.ConversionWebhookPath ||
		len(cc.CABundle) != 0 || !reflect.DeepEqual(crd.Spec.Conversion.Webhook.ConversionReviewVersions, []string{"v1"}) {
		t.Errorf("client config %+v (service %+v), want bashible-api's, no caBundle, review v1", cc, cc.Service)
	}
	if crd.Labels[deckhousev1.InjectCABundleLabel] != "true" {
		t.Errorf("labels %v, want %s", crd.Labels, deckhousev1.InjectCABundleLabel)
	}
	if !bytes.HasPrefix(out, []byte("---\n")) || bytes.Contains(out, []byte("status:")) {
		t.Errorf("not as controller-gen writes it (a document start, no status):\n%s", out)
	}
	again, err := Process(out, widgetKinds)
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("a second run changed the manifest (err %v):\n%s", err, again)
	}
}

func TestProcessLeavesOneVersionAlone(t *testing.T) {
	in := crdYAML("v1")
	out, err := Process(in, widgetKinds)
	if err != nil || !bytes.Equal(out, in) {
		t.Errorf("a CRD of one version changed (err %v):\n%s", err, out)
	}
}

func TestProcessRefusesVersionsWithoutConversions(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"no conversions for the kind", bytes.ReplaceAll(crdYAML("v2", "v1"), []byte("Widget"), []byte("Gadget")), "serves 2 versions: no conversions for Gadget"},
		{"a version not converted", crdYAML("v2", "v1", "v3"), "serves v3, which apiserver/conversion does not convert"},
		{"stored at a spoke", crdYAML("v1", "v2"), "stores v1 but apiserver/conversion's hub"},
		{"not deckhouse.io", bytes.ReplaceAll(crdYAML("v2", "v1"), []byte("group: deckhouse.io"), []byte("group: other.io")), "is not a CRD of deckhouse.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Process(tc.in, widgetKinds); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// The committed CRDs are as the generator leaves them (make
// verify-generated checks the same, with controller-gen).
func TestCommittedCRDsAreProcessed(t *testing.T) {
	files, err := filepath.Glob("../../../manifests/crds/deckhouse.io_*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Process(data, conversion.For)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if !bytes.Equal(out, data) {
			t.Errorf("%s is not as crdconversion leaves it: run make generate", f)
		}
	}
}
