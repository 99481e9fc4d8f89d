package preview

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// The tests of early-oom's settings webhook run before preview_test.go's
// (files in name order), whose last test stops bashible-apiserver.

// settingsConfigMap is a ConfigMap manifest with settings.yaml data.
func settingsConfigMap(namespace, name, data string) string {
	raw, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"data":     map[string]any{deckhousev1.EarlyOOMSettingsKey: data},
	})
	return string(raw)
}

// settingsDenial is how kubectl starts the settings webhook's refusal.
const settingsDenial = `admission webhook "` + bashiblev1alpha1.EarlyOOMSettingsWebhookName + `" denied the request: ` +
	"ConfigMap " + deckhousev1.Namespace + "/" + deckhousev1.EarlyOOMName + ": " + deckhousev1.EarlyOOMSettingsKey + ": "

// waitSettingsWebhook waits until kube-apiserver sends the settings
// ConfigMap to the webhook: a dry run of a bad one is refused.
func waitSettingsWebhook(t *testing.T) {
	t.Helper()
	framework.Poll(t, "the early-oom settings webhook refuses a dry run of recoveryPause 0s", func(context.Context) (bool, error) {
		out, err := applyOutput(t, settingsConfigMap(deckhousev1.Namespace, deckhousev1.EarlyOOMName, "recoveryPause: 0s\n"), "--dry-run=server")
		return err != nil && strings.Contains(out, settingsDenial), nil
	})
}

// settingsCalls is how many reviews kube-apiserver has sent the settings
// webhook (CREATE and UPDATE).
func settingsCalls(t *testing.T) float64 {
	t.Helper()
	return metricSum(t, "apiserver_admission_webhook_request_total", `name="`+bashiblev1alpha1.EarlyOOMSettingsWebhookName+`"`)
}

// TestEarlyOOMSettingsNoAgentWouldUseAreRefusedNamingTheField: kubectl
// apply of the settings ConfigMap with a destructive or absurd value, an
// unknown mode or bad YAML is refused, on create and on update, with the
// level, the field and the bound; a valid one is accepted.
func TestEarlyOOMSettingsNoAgentWouldUseAreRefusedNamingTheField(t *testing.T) {
	ctx := framework.Context(t)
	waitSettingsWebhook(t)
	cms := f.Kube.CoreV1().ConfigMaps(deckhousev1.Namespace)
	t.Cleanup(func() { _ = cms.Delete(context.Background(), deckhousev1.EarlyOOMName, metav1.DeleteOptions{}) })
	bad := []struct{ data, want string }{
		{"recoveryPause: 0s\n", "the cluster-wide settings: recoveryPause 0s: want 10s to 1h0m0s"},
		{"groups:\n  loki:\n    memAvailableFloor: -1Gi\n", "the settings of group loki: memAvailableFloor -1073741824 bytes: want 0 (off) or a size from 1Mi to 1Ti"},
		{"memAvailableFloor: 64Ti\n", "the cluster-wide settings: memAvailableFloor 70368744177664 bytes: want 0 (off) or a size from 1Mi to 1Ti"},
		{"memAvailableFloor: 1e30\n", "the cluster-wide settings: memAvailableFloor 1e+30: want a whole number of bytes"},
		{"groups:\n  gpu:\n    mode: Kill\n", `the settings of group gpu: mode "Kill": want one of [Evict Observe Disabled]`},
		{"mode: [Evict\n", "yaml: line 1: did not find expected ',' or ']'"},
	}
	refused := func(stage string) {
		for _, tc := range bad {
			out, err := applyOutput(t, settingsConfigMap(deckhousev1.Namespace, deckhousev1.EarlyOOMName, tc.data))
			if err == nil {
				t.Errorf("%s: kubectl apply accepted %q:\n%s", stage, tc.data, out)
				continue
			}
			if !strings.Contains(out, settingsDenial+tc.want) {
				t.Errorf("%s: the refusal of %q does not say %q:\n%s", stage, tc.data, settingsDenial+tc.want, out)
			}
		}
	}
	refused("create")
	t.Logf("kubectl apply of recoveryPause: 0s:\n%s", func() string {
		out, _ := applyOutput(t, settingsConfigMap(deckhousev1.Namespace, deckhousev1.EarlyOOMName, "recoveryPause: 0s\n"))
		return out
	}())
	if _, err := cms.Get(ctx, deckhousev1.EarlyOOMName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused settings ConfigMap exists (get: %v)", err)
	}

	const good = "mode: Observe\nrecoveryPause: 45s\ngroups:\n  loki:\n    memAvailableFloor: 512Mi\n"
	out, err := applyOutput(t, settingsConfigMap(deckhousev1.Namespace, deckhousev1.EarlyOOMName, good))
	if err != nil {
		t.Fatalf("kubectl apply refused valid settings: %v\n%s", err, out)
	}
	if want := "Warning: early-oom settings: memAvailableFloor (group loki's) is also checked on each node"; !strings.Contains(out, want) {
		t.Errorf("kubectl apply of a floor printed no %q:\n%s", want, out)
	}
	refused("update")
	got, err := cms.Get(ctx, deckhousev1.EarlyOOMName, metav1.GetOptions{})
	if err != nil || got.Data[deckhousev1.EarlyOOMSettingsKey] != good {
		t.Fatalf("the settings ConfigMap after refused updates: %v, %v; want the valid settings kept", got.Data, err)
	}
}

// TestOnlyTheSettingsConfigMapIsSentToTheSettingsWebhook counts
// kube-apiserver's calls of the settings webhook: other ConfigMaps of the
// namespace, and a ConfigMap of the same name in another namespace, cost
// no call (matchConditions, namespaceSelector), even with settings the
// webhook would refuse; the settings ConfigMap costs one.
func TestOnlyTheSettingsConfigMapIsSentToTheSettingsWebhook(t *testing.T) {
	waitSettingsWebhook(t)
	bad := "recoveryPause: 0s\n"
	before := settingsCalls(t)
	for _, cm := range []struct{ namespace, name string }{
		{deckhousev1.Namespace, "early-oom-notes"}, {metav1.NamespaceDefault, deckhousev1.EarlyOOMName},
	} {
		t.Cleanup(func() {
			_ = f.Kube.CoreV1().ConfigMaps(cm.namespace).Delete(context.Background(), cm.name, metav1.DeleteOptions{})
		})
		for _, data := range []string{bad, bad + "samples: 0\n"} { // a create and an update
			if out, err := applyOutput(t, settingsConfigMap(cm.namespace, cm.name, data)); err != nil {
				t.Fatalf("kubectl apply of ConfigMap %s/%s: %v\n%s", cm.namespace, cm.name, err, out)
			}
		}
	}
	if got := settingsCalls(t); got != before {
		t.Errorf("other ConfigMaps were sent to the settings webhook: %v reviews, want %v", got, before)
	}
	if out, err := applyOutput(t, settingsConfigMap(deckhousev1.Namespace, deckhousev1.EarlyOOMName, bad), "--dry-run=server"); err == nil {
		t.Fatalf("a dry run of bad settings was accepted:\n%s", out)
	}
	if got := settingsCalls(t); got != before+1 {
		t.Errorf("the settings ConfigMap: %v reviews, want %v", got, before+1)
	}
}
