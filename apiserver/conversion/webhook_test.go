package conversion

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/klog/v2"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// widget is a test kind: hub v2 holds spec.size and spec.colour, spoke v1
// calls size spec.count and has no colour.
var widget = schema.GroupKind{Group: "deckhouse.io", Kind: "Widget"}

func widgetKinds() map[schema.GroupKind]Kind {
	registerWidgetSchema()
	return map[schema.GroupKind]Kind{widget: {GroupKind: widget, Hub: "v2", Spokes: map[string]Spoke{"v1": {
		Up: func(obj map[string]any) error {
			spec, _ := obj["spec"].(map[string]any)
			if spec == nil {
				return nil
			}
			if c, ok := spec["count"]; ok {
				if _, isNum := c.(int64); !isNum {
					return errors.New("spec.count is not a number")
				}
				spec["size"] = c
				delete(spec, "count")
			}
			return nil
		},
		Down: func(obj map[string]any) error {
			spec, _ := obj["spec"].(map[string]any)
			if spec == nil {
				return nil
			}
			if c, ok := spec["size"]; ok {
				spec["count"] = c
				delete(spec, "size")
			}
			delete(spec, "colour")
			return nil
		},
		Restore: func(hub, saved map[string]any) error {
			colour, ok, _ := unstructured.NestedString(saved, "spec", "colour")
			if ok {
				return unstructured.SetNestedField(hub, colour, "spec", "colour")
			}
			return nil
		},
	}}}}
}

func object(apiVersion, name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": apiVersion, "kind": "Widget",
		"metadata": map[string]any{"name": name, "uid": "uid-" + name, "resourceVersion": "7", "labels": map[string]any{"a": "b"}},
		"spec":     spec}
}

func reviewBody(t *testing.T, desired string, objs ...map[string]any) []byte {
	t.Helper()
	req := &apiextensionsv1.ConversionRequest{UID: types.UID("review-1"), DesiredAPIVersion: desired}
	for _, o := range objs {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		req.Objects = append(req.Objects, runtime.RawExtension{Raw: data})
	}
	data, err := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func post(t *testing.T, wh http.Handler, body []byte) (*httptest.ResponseRecorder, *apiextensionsv1.ConversionReview) {
	t.Helper()
	rec := httptest.NewRecorder()
	wh.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, bashiblev1alpha1.ConversionWebhookPath, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		return rec, nil
	}
	out := &apiextensionsv1.ConversionReview{}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatalf("the answer is not a ConversionReview: %v\n%s", err, rec.Body.String())
	}
	if out.APIVersion != "apiextensions.k8s.io/v1" || out.Kind != "ConversionReview" || out.Response == nil {
		t.Fatalf("the answer is not a v1 ConversionReview with a response: %s", rec.Body.String())
	}
	return rec, out
}

func converted(t *testing.T, resp *apiextensionsv1.ConversionResponse) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, raw := range resp.ConvertedObjects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// A review of several objects, some already at the version asked for, is
// answered with each converted in order, its metadata kept (kube-apiserver
// refuses a conversion that changes anything of it but labels and
// annotations), and a round trip through the older version loses nothing.
func TestWebhookConvertsEveryObjectOfAReview(t *testing.T) {
	wh := NewWebhookFor(widgetKinds())
	_, review := post(t, wh, reviewBody(t, "deckhouse.io/v1",
		object("deckhouse.io/v2", "a", map[string]any{"size": int64(3), "colour": "red"}),
		object("deckhouse.io/v1", "b", map[string]any{"count": int64(5)})))
	resp := review.Response
	if resp.UID != "review-1" || resp.Result.Status != metav1.StatusSuccess {
		t.Fatalf("response uid %q result %+v, want review-1 Success", resp.UID, resp.Result)
	}
	objs := converted(t, resp)
	if len(objs) != 2 {
		t.Fatalf("%d objects converted, want 2", len(objs))
	}
	for i, o := range objs {
		if o.GetAPIVersion() != "deckhouse.io/v1" || o.GetKind() != "Widget" {
			t.Errorf("object %d is %s %s, want deckhouse.io/v1 Widget", i, o.GetAPIVersion(), o.GetKind())
		}
		if o.GetUID() != types.UID("uid-"+o.GetName()) || o.GetResourceVersion() != "7" || o.GetLabels()["a"] != "b" {
			t.Errorf("object %d: metadata changed: %v", i, o.Object["metadata"])
		}
	}
	if c, _, _ := unstructured.NestedInt64(objs[0].Object, "spec", "count"); c != 3 {
		t.Errorf("a: spec %v, want count 3", objs[0].Object["spec"])
	}
	if _, ok := objs[0].GetAnnotations()[deckhousev1.ConversionDataAnnotation]; !ok {
		t.Errorf("a lost its colour going down without keeping it in %s: %v", deckhousev1.ConversionDataAnnotation, objs[0].GetAnnotations())
	}

	// And back up: the colour is restored, the annotation gone.
	_, back := post(t, wh, reviewBody(t, "deckhouse.io/v2", objs[0].Object))
	up := converted(t, back.Response)
	if len(up) != 1 {
		t.Fatalf("%d objects converted back, want 1", len(up))
	}
	if colour, _, _ := unstructured.NestedString(up[0].Object, "spec", "colour"); colour != "red" {
		t.Errorf("round trip through v1: spec %v, want colour red", up[0].Object["spec"])
	}
	if _, ok := up[0].GetAnnotations()[deckhousev1.ConversionDataAnnotation]; ok {
		t.Errorf("round trip through v1 left %s", deckhousev1.ConversionDataAnnotation)
	}
}

// A review that cannot be converted whole is answered with a Failure that
// names the object and the cause, and no objects; the message is what the
// reader sees (kube-apiserver returns it), the log never holds content.
func TestWebhookFailsNamingTheObject(t *testing.T) {
	var logs bytes.Buffer
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	_ = flags.Set("logtostderr", "false")
	_ = flags.Set("v", "4")
	klog.SetOutput(&logs)
	defer func() {
		klog.Flush()
		_ = flags.Set("logtostderr", "true")
		_ = flags.Set("v", "0")
	}()

	const secret = "s3cr3t-private-key"
	wh := NewWebhookFor(widgetKinds())
	for _, tc := range []struct {
		name    string
		desired string
		objs    []map[string]any
		want    string
	}{
		{"the spoke refuses", "deckhouse.io/v2",
			[]map[string]any{object("deckhouse.io/v1", "ok", nil), object("deckhouse.io/v1", "bad", map[string]any{"count": "many", "key": secret})},
			"object 1 (Widget bad): Widget bad: converting v1 to v2: spec.count is not a number"},
		{"a version not served", "deckhouse.io/v3", []map[string]any{object("deckhouse.io/v1", "a", map[string]any{"key": secret})},
			"object 0 (Widget a): Widget.deckhouse.io: version v3 is not served"},
		{"from a version not served", "deckhouse.io/v2", []map[string]any{object("deckhouse.io/v0", "a", nil)},
			"object 0 (Widget a): Widget.deckhouse.io: version v0 is not served"},
		{"a kind without conversions", "deckhouse.io/v2",
			[]map[string]any{{"apiVersion": "deckhouse.io/v1", "kind": "Gadget", "metadata": map[string]any{"name": "g"}}},
			"object 0 (Gadget g): no conversions for Gadget.deckhouse.io"},
		{"another group", "other.io/v2", []map[string]any{object("deckhouse.io/v1", "a", nil)},
			"object 0 (Widget a): deckhouse.io/v1 cannot convert to other.io/v2, another group"},
		{"no group in the desired version", "v2", []map[string]any{object("deckhouse.io/v1", "a", nil)},
			`desiredAPIVersion "v2" is not group/version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, review := post(t, wh, reviewBody(t, tc.desired, tc.objs...))
			resp := review.Response
			if resp.UID != "review-1" || resp.Result.Status != metav1.StatusFailure || len(resp.ConvertedObjects) != 0 {
				t.Fatalf("response %+v, want review-1, Failure and no objects", resp)
			}
			if !strings.HasPrefix(resp.Result.Message, tc.want) {
				t.Errorf("message %q, want it to start with %q", resp.Result.Message, tc.want)
			}
			if strings.Contains(resp.Result.Message, secret) {
				t.Errorf("message %q holds the object's content", resp.Result.Message)
			}
		})
	}
	// A success is logged too (at -v=4): the count, never the objects.
	post(t, wh, reviewBody(t, "deckhouse.io/v2", object("deckhouse.io/v1", "fine", map[string]any{"key": secret})))
	klog.Flush()
	if !strings.Contains(logs.String(), "A conversion failed") || !strings.Contains(logs.String(), "Converted") {
		t.Fatalf("the webhook logged neither its failures nor its successes:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log holds an object's content:\n%s", logs.String())
	}
}

// What is not a v1 ConversionReview, or is over the bound, is refused
// before anything is converted.
func TestWebhookRefusesWhatIsNotAReview(t *testing.T) {
	wh := NewWebhookFor(widgetKinds())
	v1beta1 := bytes.Replace(reviewBody(t, "deckhouse.io/v2", object("deckhouse.io/v1", "a", nil)),
		[]byte(`"apiextensions.k8s.io/v1"`), []byte(`"apiextensions.k8s.io/v1beta1"`), 1)
	over := append([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"deckhouse.io/v2","objects":[{"pad":"`),
		bytes.Repeat([]byte("x"), MaxReviewBytes)...)
	over = append(over, []byte(`"}]}}`)...)
	for _, tc := range []struct {
		name   string
		method string
		body   []byte
		code   int
		want   string
	}{
		{"a GET", http.MethodGet, nil, http.StatusMethodNotAllowed, "POST an apiextensions.k8s.io/v1 ConversionReview"},
		{"not JSON", http.MethodPost, []byte("{"), http.StatusBadRequest, "POST an apiextensions.k8s.io/v1 ConversionReview"},
		{"no request", http.MethodPost, []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}`), http.StatusBadRequest, "no request"},
		{"a v1beta1 review", http.MethodPost, v1beta1, http.StatusBadRequest, "set conversionReviewVersions: [v1]"},
		{"over the bound", http.MethodPost, over, http.StatusRequestEntityTooLarge, "is over 33554432 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			wh.ServeHTTP(rec, httptest.NewRequest(tc.method, bashiblev1alpha1.ConversionWebhookPath, bytes.NewReader(tc.body)))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("%d %q, want %d with %q", rec.Code, rec.Body.String(), tc.code, tc.want)
			}
		})
	}
}

// With no kinds given, the webhook converts what Kinds holds.
func TestWebhookUsesKinds(t *testing.T) {
	saved := Kinds
	defer func() { Kinds = saved }()
	Kinds = widgetKinds()
	_, review := post(t, NewWebhook(), reviewBody(t, "deckhouse.io/v2", object("deckhouse.io/v1", "a", map[string]any{"count": int64(2)})))
	if review.Response.Result.Status != metav1.StatusSuccess {
		t.Fatalf("result %+v, want Success", review.Response.Result)
	}
	if s, _, _ := unstructured.NestedInt64(converted(t, review.Response)[0].Object, "spec", "size"); s != 2 {
		t.Errorf("converted %v, want size 2", review.Response.ConvertedObjects)
	}
}

// registerWidgetSchema gives the test kind's hub a schema, as a CRD gives
// every real kind's (validate.go checks what the annotation brings back
// against it).
func registerWidgetSchema() {
	all, err := loadSchemas()
	if err != nil {
		panic(err)
	}
	props := &apiextensionsinternal.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsinternal.JSONSchemaProps{
		"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"},
		"spec": {Type: "object", Properties: map[string]apiextensionsinternal.JSONSchemaProps{
			"size": {Type: "integer"}, "colour": {Type: "string"}, "count": {Type: "integer"}}},
	}}
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		panic(err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		panic(err)
	}
	schemasMu.Lock()
	defer schemasMu.Unlock()
	all[widget.WithVersion("v2")] = &hubSchema{structural: s, validator: validator, cel: schemacel.NewValidator(s, true, celconfig.PerCallLimit)}
}
