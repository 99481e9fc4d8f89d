package admission

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
)

// previewWebhook is the webhook of the shipped
// ValidatingWebhookConfiguration.
func previewWebhook(t *testing.T) *admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	cfg := shippedWebhooks(t)
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == bashiblev1alpha1.PreviewWebhookName {
			return &cfg.Webhooks[i]
		}
	}
	t.Fatalf("preview-webhook.yaml has no webhook %s", bashiblev1alpha1.PreviewWebhookName)
	return nil
}

// shippedWebhooks is the shipped ValidatingWebhookConfiguration of
// bashible-apiserver.
func shippedWebhooks(t *testing.T) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	raw, err := manifests.FS.ReadFile(deckhousev1.BashibleAPIServerName + "/preview-webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(raw, cfg); err != nil {
		t.Fatalf("preview-webhook.yaml: %v", err)
	}
	return cfg
}

func object(kind string, spec map[string]any, annotations map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deckhouse.io/v1", "kind": kind,
		"metadata": map[string]any{"name": "worker", "annotations": annotations},
	}}
	if spec != nil {
		o.Object["spec"] = spec
	}
	return o
}

// TestMatchConditionsSkipMetadataOnlyUpdatesAndNodeManagersOwnWrites
// evaluates the shipped matchConditions with kube-apiserver's own
// compiler and matcher (the code its webhook dispatcher runs).
func TestMatchConditionsSkipMetadataOnlyUpdatesAndNodeManagersOwnWrites(t *testing.T) {
	hook := previewWebhook(t)
	matcher := webhook.NewValidatingWebhookAccessor("preview", bashiblev1alpha1.PreviewWebhookConfigurationName, hook).
		GetCompiledMatcher(cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())))
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	controller := &user.DefaultInfo{Name: serviceaccount.MakeUsername(deckhousev1.Namespace, deckhousev1.NodeManagerControllerName)}
	apiserver := &user.DefaultInfo{Name: serviceaccount.MakeUsername(deckhousev1.Namespace, deckhousev1.BashibleAPIServerName)}
	spec := map[string]any{"nodeType": "Static"}
	changed := map[string]any{"nodeType": "Static", "cri": map[string]any{"type": "ContainerdV2"}}
	for _, tc := range []struct {
		name     string
		op       admission.Operation
		who      user.Info
		obj, old *unstructured.Unstructured
		want     bool
	}{
		{"a user's create", admission.Create, alice, object("NodeGroup", spec, nil), nil, true},
		{"a user's change of spec", admission.Update, alice, object("NodeGroup", changed, nil), object("NodeGroup", spec, nil), true},
		{"a spec added", admission.Update, alice, object("NodeGroup", spec, nil), object("NodeGroup", nil, nil), true},
		{"a user's annotation", admission.Update, alice,
			object("NodeGroupConfiguration", spec, map[string]any{"example.com/a": "b"}), object("NodeGroupConfiguration", spec, nil), false},
		{"an update without spec", admission.Update, alice, object("NodeGroup", nil, map[string]any{"example.com/a": "b"}), object("NodeGroup", nil, nil), false},
		{"node-manager-controller's annotation", admission.Update, controller,
			object("NodeGroup", spec, map[string]any{"example.com/a": "b"}), object("NodeGroup", spec, nil), false},
		{"node-manager-controller's change of spec", admission.Update, controller, object("NodeGroup", changed, nil), object("NodeGroup", spec, nil), false},
		{"bashible-apiserver's create", admission.Create, apiserver, object("NodeGroup", spec, nil), nil, false},
		{"a ServiceAccount of the same name elsewhere", admission.Update, &user.DefaultInfo{Name: serviceaccount.MakeUsername("default", deckhousev1.NodeManagerControllerName)},
			object("NodeGroup", changed, nil), object("NodeGroup", spec, nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gvk := schema.GroupVersionKind{Group: deckhousev1.GroupName, Version: "v1", Kind: tc.obj.GetKind()}
			attr := admission.NewAttributesRecord(tc.obj, nilIfEmpty(tc.old), gvk, "", "worker",
				schema.GroupVersionResource{Group: deckhousev1.GroupName, Version: "v1", Resource: "nodegroups"}, "", tc.op, nil, false, tc.who)
			va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: tc.obj}
			if tc.old != nil {
				va.VersionedOldObject = tc.old
			}
			got := matcher.Match(context.Background(), va, nil, nil)
			if got.Error != nil {
				t.Fatalf("matchConditions failed (condition %q): %v", got.FailedConditionName, got.Error)
			}
			if got.Matches != tc.want {
				t.Fatalf("sent to the webhook: %v, want %v (condition %q)", got.Matches, tc.want, got.FailedConditionName)
			}
		})
	}
	for _, r := range hook.Rules {
		for _, op := range r.Operations {
			if op == admissionregistrationv1.Delete || op == admissionregistrationv1.OperationAll {
				t.Errorf("rule %v matches %s: a removal renders nothing to refuse", r.Resources, op)
			}
		}
	}
}

// nilIfEmpty keeps a nil *Unstructured a nil runtime.Object.
func nilIfEmpty(u *unstructured.Unstructured) runtime.Object {
	if u == nil {
		return nil
	}
	return u
}
