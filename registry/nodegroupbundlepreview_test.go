package registry

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/preview"
)

type fakePreviewer struct {
	got preview.Proposal
	res *preview.Result
}

func (f *fakePreviewer) Preview(_ context.Context, p preview.Proposal) (*preview.Result, error) {
	f.got = p
	return f.res, nil
}

func createPreview(t *testing.T, f *fakePreviewer, spec bashiblev1alpha1.NodeGroupBundlePreviewSpec) (*bashiblev1alpha1.NodeGroupBundlePreview, error) {
	t.Helper()
	r := NewNodeGroupBundlePreviews(f, NewMetrics())
	obj, err := r.Create(context.Background(), &bashiblev1alpha1.NodeGroupBundlePreview{Spec: spec}, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj.(*bashiblev1alpha1.NodeGroupBundlePreview), nil
}

func raw(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }

func TestAPreviewIsAnsweredInItsStatus(t *testing.T) {
	f := &fakePreviewer{res: &preview.Result{
		Groups:   []preview.GroupChange{{Group: "worker", Checksum: "new"}},
		Failures: []preview.GroupFailure{{Group: "master", Config: "other", Message: "line 1: boom"}},
	}}
	out, err := createPreview(t, f, bashiblev1alpha1.NodeGroupBundlePreviewSpec{NodeGroupConfiguration: raw(
		`{"apiVersion":"deckhouse.io/v1alpha1","kind":"NodeGroupConfiguration","metadata":{"name":"c"},"spec":{"content":"echo"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Status.Groups) != 1 || out.Status.Groups[0].Group != "worker" ||
		len(out.Status.Failures) != 1 || out.Status.Failures[0].NodeGroupConfiguration != "other" {
		t.Fatalf("status %+v", out.Status)
	}
	c := f.got.Config
	if c == nil || c.Spec.Weight != 100 || c.Spec.NodeGroups[0] != "*" || c.Spec.Bundles[0] != "*" {
		t.Fatalf("the proposal did not get the API's defaults: %+v", f.got.Config)
	}
}

func TestAPreviewOfTheWrongKindOrWithoutANameIsABadRequest(t *testing.T) {
	for name, spec := range map[string]bashiblev1alpha1.NodeGroupBundlePreviewSpec{
		"nothing":       {},
		"wrong kind":    {NodeGroup: raw(`{"apiVersion":"deckhouse.io/v1alpha1","kind":"NodeGroupConfiguration","metadata":{"name":"x"}}`)},
		"no name":       {NodeGroup: raw(`{"apiVersion":"deckhouse.io/v1","kind":"NodeGroup","spec":{"nodeType":"Static"}}`)},
		"typo":          {NodeGroup: raw(`{"apiVersion":"deckhouse.io/v1","kind":"NodeGroup","metadata":{"name":"x"},"spec":{"nodeTyp":"Static"}}`)},
		"not an object": {NodeGroupConfiguration: raw(`[1]`)},
	} {
		_, err := createPreview(t, &fakePreviewer{res: &preview.Result{}}, spec)
		if !apierrors.IsBadRequest(err) {
			t.Errorf("%s: %v, want a bad request", name, err)
		}
	}
	_, err := createPreview(t, &fakePreviewer{res: &preview.Result{}}, bashiblev1alpha1.NodeGroupBundlePreviewSpec{
		NodeGroup: raw(`{"apiVersion":"deckhouse.io/v1","kind":"NodeGroup","metadata":{"name":"x"},"spec":{"nodeTyp":"Static"}}`)})
	if err == nil || !strings.Contains(err.Error(), "nodeTyp") {
		t.Errorf("an unknown field is not named: %v", err)
	}
}
