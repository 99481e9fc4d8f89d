package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/preview"
)

func ngc(name string) preview.Proposal {
	return preview.Proposal{Config: &deckhousev1alpha1.NodeGroupConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

func TestAConfigurationThatDoesNotRenderIsRefusedNamingGroupsAndLine(t *testing.T) {
	msg := "NodeGroupConfiguration bad: template NodeGroupConfiguration/bad, line 2: map has no entry for key \"nope\""
	res := &preview.Result{Failures: []preview.GroupFailure{
		{Group: "master", Config: "bad", Message: msg},
		{Group: "worker", Config: "bad", Message: msg},
	}}
	d := Decide(ngc("bad"), res, nil)
	if d.Allowed {
		t.Fatal("a configuration that does not render was allowed")
	}
	want := "NodeGroupConfiguration bad does not render for node group master, worker: " + msg
	if d.Message != want {
		t.Fatalf("message %q, want %q", d.Message, want)
	}
}

func TestAnotherConfigurationsFailureIsOnlyAWarning(t *testing.T) {
	res := &preview.Result{Failures: []preview.GroupFailure{{Group: "master", Config: "other", Message: "line 1:\nboom"}}}
	d := Decide(ngc("mine"), res, nil)
	if !d.Allowed {
		t.Fatalf("refused for another configuration's failure: %s", d.Message)
	}
	want := "bashible preview: group master does not render (NodeGroupConfiguration other) and keeps its last good bundle: line 1: boom"
	if !contains(d.Warnings, want) {
		t.Fatalf("warnings %q lack %q", d.Warnings, want)
	}
}

func TestWarningsSayGroupsNodesStepsAndDisruption(t *testing.T) {
	res := &preview.Result{Groups: []preview.GroupChange{
		{Group: "master", NodeCount: 0, ApprovalMode: "Automatic", PreviousChecksum: "old", Steps: []bashiblev1alpha1.StepPreview{{Name: "100_a.sh", Change: bashiblev1alpha1.StepAdded}}},
		{Group: "worker", NodeCount: 3, ApprovalMode: "Manual", PreviousChecksum: "old", Disruptive: true, Steps: []bashiblev1alpha1.StepPreview{
			{Name: "040_containerd.sh", Change: bashiblev1alpha1.StepModified, Disruption: []string{"the container runtime changes"}},
			{Name: "100_a.sh", Change: bashiblev1alpha1.StepAdded},
		}},
	}}
	d := Decide(ngc("a"), res, nil)
	want := []string{
		"bashible preview: 2 node group(s) change, 1 of them disruptively (worker)",
		"bashible preview: group master, 0 node(s): 1 step(s) change: 100_a.sh (added); not disruptive",
		"bashible preview: group worker, 3 node(s): 2 step(s) change: 040_containerd.sh (modified), 100_a.sh (added); DISRUPTIVE (approvalMode Manual)",
		"bashible preview: group worker: 040_containerd.sh may disrupt workloads: the container runtime changes",
		"bashible preview: the full diff: kubectl create -o yaml -f with a NodeGroupBundlePreview (see docs/operations/preview.md)",
	}
	if !d.Allowed || strings.Join(d.Warnings, "\n") != strings.Join(want, "\n") {
		t.Fatalf("allowed %v, warnings:\n%s\nwant:\n%s", d.Allowed, strings.Join(d.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

func TestANewGroupIsSummedUpNotListedStepByStep(t *testing.T) {
	res := &preview.Result{Groups: []preview.GroupChange{{Group: "new", Disruptive: true, Steps: make([]bashiblev1alpha1.StepPreview, 15)}}}
	d := Decide(preview.Proposal{}, res, nil)
	want := "bashible preview: group new, 0 node(s): not published yet; its first bundle has 15 file(s)"
	if len(d.Warnings) != 3 || d.Warnings[1] != want {
		t.Fatalf("warnings %q; want the summary, %q and the diff hint", d.Warnings, want)
	}
}

func TestNoChangeSaysSo(t *testing.T) {
	d := Decide(ngc("a"), &preview.Result{}, nil)
	if !d.Allowed || len(d.Warnings) != 1 || d.Warnings[0] != "bashible preview: no node group's bundle changes" {
		t.Fatalf("%+v", d)
	}
}

func TestAPreviewThatCannotRunAdmitsWithAWarning(t *testing.T) {
	d := Decide(ngc("a"), nil, preview.ErrBusy)
	if !d.Allowed || len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "admitted without a preview") {
		t.Fatalf("%+v", d)
	}
}

func TestALongWarningIsCutToWhatReachesTheUser(t *testing.T) {
	w := warning("%s", strings.Repeat("x", 1000))
	if len([]rune(w)) != maxWarningRunes || !strings.HasSuffix(w, "...") {
		t.Fatalf("warning of %d runes: %q", len([]rune(w)), w)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type fakePreviewer struct {
	res *preview.Result
	got preview.Proposal
}

func (f *fakePreviewer) Preview(_ context.Context, p preview.Proposal) (*preview.Result, error) {
	f.got = p
	return f.res, nil
}

func review(t *testing.T, h http.Handler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, bashiblev1alpha1.PreviewWebhookPath+"?timeout=5s", strings.NewReader(string(body))))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("decode the answer: %v %s", err, rec.Body)
	}
	if out.Kind != "AdmissionReview" || out.Response.UID != req.UID {
		t.Fatalf("answer %s uid %s, want AdmissionReview uid %s", out.Kind, out.Response.UID, req.UID)
	}
	return out.Response
}

func TestTheWebhookRefusesWithStatusAndDecodesTheConfiguration(t *testing.T) {
	fake := &fakePreviewer{res: &preview.Result{Failures: []preview.GroupFailure{{Group: "worker", Config: "bad", Message: "line 3: boom"}}}}
	obj := `{"apiVersion":"deckhouse.io/v1alpha1","kind":"NodeGroupConfiguration","metadata":{"name":"bad"},"spec":{"content":"x","weight":7,"nodeGroups":["worker"],"bundles":["*"]}}`
	resp := review(t, NewWebhook(fake, nil), &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create, Name: "bad",
		Kind: configKind, Object: runtime.RawExtension{Raw: []byte(obj)}})
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity || !strings.Contains(resp.Result.Message, "line 3: boom") {
		t.Fatalf("answer %+v", resp)
	}
	if fake.got.Config == nil || fake.got.Config.Spec.Weight != 7 {
		t.Fatalf("the previewer got %+v", fake.got)
	}
}

func TestTheWebhookAdmitsDeletesAndUnknownKindsWithoutAPreview(t *testing.T) {
	fake := &fakePreviewer{res: &preview.Result{}}
	resp := review(t, NewWebhook(fake, nil), &admissionv1.AdmissionRequest{UID: "u2", Operation: admissionv1.Delete, Kind: configKind})
	if !resp.Allowed || len(resp.Warnings) != 0 || fake.got.Config != nil {
		t.Fatalf("delete: %+v", resp)
	}
	resp = review(t, NewWebhook(fake, nil), &admissionv1.AdmissionRequest{UID: "u3", Operation: admissionv1.Create,
		Kind: metav1.GroupVersionKind{Group: "deckhouse.io", Version: "v1", Kind: "Instance"}, Object: runtime.RawExtension{Raw: []byte(`{}`)}})
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "without a preview") {
		t.Fatalf("unknown kind: %+v", resp)
	}
}

func TestTheWebhookAnswersOnlyPost(t *testing.T) {
	rec := httptest.NewRecorder()
	NewWebhook(&fakePreviewer{}, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, bashiblev1alpha1.PreviewWebhookPath, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", rec.Code)
	}
}
