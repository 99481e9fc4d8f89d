package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// settingsReview posts an AdmissionReview of a ConfigMap to the settings
// webhook's handler and returns its answer.
func settingsReview(t *testing.T, op admissionv1.Operation, namespace, name string, data map[string]string) *admissionv1.AdmissionResponse {
	t.Helper()
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Data: data}
	raw, err := json.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Namespace: namespace, Name: name, Operation: op, Object: runtime.RawExtension{Raw: raw}}}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	NewSettingsWebhook().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, bashiblev1alpha1.EarlyOOMSettingsWebhookPath+"?timeout=3s", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != "u-1" {
		t.Fatalf("answer %s: %v", rec.Body, err)
	}
	return out.Response
}

func settingsData(yaml string) map[string]string {
	return map[string]string{deckhousev1.EarlyOOMSettingsKey: yaml}
}

// TestTheSettingsWebhookRefusesWhatNoAgentWouldUse: each refusal names
// the ConfigMap, the level, the field and the bound.
func TestTheSettingsWebhookRefusesWhatNoAgentWouldUse(t *testing.T) {
	for data, want := range map[string]string{
		"recoveryPause: 0s\n":                             "the cluster-wide settings: recoveryPause 0s: want 10s to 1h0m0s",
		"groups:\n  loki:\n    memAvailableFloor: -1Gi\n": "the settings of group loki: memAvailableFloor -1073741824 bytes: want 0 (off) or a size from 1Mi to 1Ti",
		"memAvailableFloor: 1e30\n":                       "memAvailableFloor 1e+30: want a whole number of bytes",
		"mode: Kill\n":                                    `mode "Kill": want one of [Evict Observe Disabled]`,
		"mode: [Evict\n":                                  "settings.yaml: yaml: line 1: did not find expected",
		"recoverypause: 30s\n":                            `unknown field "recoverypause"`,
	} {
		for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
			resp := settingsReview(t, op, deckhousev1.Namespace, deckhousev1.EarlyOOMName, settingsData(data))
			if resp.Allowed || resp.Result == nil {
				t.Errorf("%s %q: allowed", op, data)
				continue
			}
			msg := resp.Result.Message
			if !strings.HasPrefix(msg, "ConfigMap d8-cloud-instance-manager/early-oom: settings.yaml: ") || !strings.Contains(msg, want) ||
				resp.Result.Code != http.StatusUnprocessableEntity || strings.Contains(msg, "\n") {
				t.Errorf("%s %q: refused with %d %q; want 422 on one line naming %q", op, data, resp.Result.Code, msg, want)
			}
		}
	}
}

func TestTheSettingsWebhookAdmitsUsableSettingsAndWarnsOfTheNodesFloorCheck(t *testing.T) {
	resp := settingsReview(t, admissionv1.Create, deckhousev1.Namespace, deckhousev1.EarlyOOMName,
		settingsData("fullAvg10: 35\ngroups:\n  loki:\n    memAvailableFloor: 512Mi\n"))
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	want := "early-oom settings: memAvailableFloor (group loki's) is also checked on each node: where it is above 0.5 of the node's RAM"
	if len(resp.Warnings) != 1 || !strings.HasPrefix(resp.Warnings[0], want) {
		t.Errorf("warnings %q; want one starting %q", resp.Warnings, want)
	}
	resp = settingsReview(t, admissionv1.Update, deckhousev1.Namespace, deckhousev1.EarlyOOMName, settingsData("mode: Observe\n"))
	if !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("mode Observe: allowed %v, warnings %q; want allowed without warnings", resp.Allowed, resp.Warnings)
	}
	resp = settingsReview(t, admissionv1.Create, deckhousev1.Namespace, deckhousev1.EarlyOOMName, map[string]string{"settings.yml": "mode: Kill\n"})
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "has no data key settings.yaml") {
		t.Errorf("a misnamed key: allowed %v, warnings %q; want allowed with a warning that the flags apply", resp.Allowed, resp.Warnings)
	}
}

// TestTheSettingsWebhookLeavesOtherConfigMapsAlone: sent anything but the
// settings ConfigMap (the configuration should not), it admits it unread.
func TestTheSettingsWebhookLeavesOtherConfigMapsAlone(t *testing.T) {
	bad := settingsData("recoveryPause: 0s\n")
	for _, tc := range []struct{ namespace, name string }{
		{deckhousev1.Namespace, "other"}, {"default", deckhousev1.EarlyOOMName},
	} {
		if resp := settingsReview(t, admissionv1.Update, tc.namespace, tc.name, bad); !resp.Allowed {
			t.Errorf("ConfigMap %s/%s refused: %v", tc.namespace, tc.name, resp.Result)
		}
	}
}

// settingsWebhook is the settings webhook of the shipped
// ValidatingWebhookConfiguration.
func settingsWebhook(t *testing.T) *admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	cfg := shippedWebhooks(t)
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == bashiblev1alpha1.EarlyOOMSettingsWebhookName {
			return &cfg.Webhooks[i]
		}
	}
	t.Fatalf("preview-webhook.yaml has no webhook %s", bashiblev1alpha1.EarlyOOMSettingsWebhookName)
	return nil
}

// TestOnlyTheSettingsConfigMapIsSentToTheSettingsWebhook evaluates the
// shipped namespaceSelector, rules and matchConditions: only CREATE and
// UPDATE of the one ConfigMap match.
func TestOnlyTheSettingsConfigMapIsSentToTheSettingsWebhook(t *testing.T) {
	hook := settingsWebhook(t)
	if svc := hook.ClientConfig.Service; svc == nil || svc.Path == nil || *svc.Path != bashiblev1alpha1.EarlyOOMSettingsWebhookPath || hook.ClientConfig.Service.Name != bashiblev1alpha1.ServiceName ||
		hook.ClientConfig.Service.Namespace != deckhousev1.Namespace {
		t.Errorf("the webhook calls %+v; want %s/%s at %s", hook.ClientConfig.Service, deckhousev1.Namespace, bashiblev1alpha1.ServiceName, bashiblev1alpha1.EarlyOOMSettingsWebhookPath)
	}
	if hook.NamespaceSelector == nil || len(hook.NamespaceSelector.MatchExpressions) != 0 ||
		len(hook.NamespaceSelector.MatchLabels) != 1 || hook.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != deckhousev1.Namespace {
		t.Errorf("namespaceSelector %+v; want only %s=%s", hook.NamespaceSelector, corev1.LabelMetadataName, deckhousev1.Namespace)
	}
	if len(hook.Rules) != 1 || strings.Join(hook.Rules[0].Resources, ",") != "configmaps" || len(hook.Rules[0].Operations) != 2 ||
		hook.Rules[0].Operations[0] != admissionregistrationv1.Create || hook.Rules[0].Operations[1] != admissionregistrationv1.Update {
		t.Errorf("rules %+v; want CREATE and UPDATE of configmaps only", hook.Rules)
	}
	if *hook.TimeoutSeconds > 5 {
		t.Errorf("timeout %ds; the check takes microseconds", *hook.TimeoutSeconds)
	}
	matcher := webhook.NewValidatingWebhookAccessor("settings", bashiblev1alpha1.PreviewWebhookConfigurationName, hook).
		GetCompiledMatcher(cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())))
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	for name, want := range map[string]bool{deckhousev1.EarlyOOMName: true, "other": false, deckhousev1.EarlyOOMName + "-x": false, "": false} {
		for _, op := range []admission.Operation{admission.Create, admission.Update} {
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": name, "namespace": deckhousev1.Namespace}}}
			gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
			var old runtime.Object
			if op == admission.Update {
				old = obj.DeepCopy()
			}
			attr := admission.NewAttributesRecord(obj, old, gvk, deckhousev1.Namespace, name,
				schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "", op, nil, false, alice)
			va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}
			got := matcher.Match(context.Background(), va, nil, nil)
			if got.Error != nil {
				t.Fatalf("matchConditions failed (condition %q): %v", got.FailedConditionName, got.Error)
			}
			if got.Matches != want {
				t.Errorf("%s of ConfigMap %q sent to the webhook: %v, want %v", op, name, got.Matches, want)
			}
		}
	}
}
