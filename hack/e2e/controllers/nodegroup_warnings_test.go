package controllers

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/status"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// deleteGroupAtEnd deletes a NodeGroup the test applied with kubectl.
func deleteGroupAtEnd(t *testing.T, name string) {
	t.Cleanup(func() { _ = f.NM.DeckhouseV1().NodeGroups().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// waitInertFields waits until the group's InertFields condition has the
// status and its message names every field in paths.
func waitInertFields(t *testing.T, group string, want metav1.ConditionStatus, paths ...string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	framework.Poll(t, "the "+status.ConditionInertFields+" condition of NodeGroup "+group, func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c = meta.FindStatusCondition(ng.Status.Conditions, status.ConditionInertFields)
		if c == nil || c.Status != want || c.ObservedGeneration != ng.Generation {
			return false, nil
		}
		for _, p := range paths {
			if !strings.Contains(c.Message, p) {
				return false, nil
			}
		}
		return true, nil
	})
	return c
}

// A NodeGroup that sets fields nothing here acts on is accepted; kubectl
// apply prints a warning naming each field and why, and the group's
// InertFields condition lists them until they are removed.
func TestInertFieldsAreAcceptedWithAWarningAndACondition(t *testing.T) {
	t.Parallel()
	deleteGroupAtEnd(t, "inert")
	warnings := f.KubectlApply(t, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: inert
spec:
  nodeType: Static
  chaos:
    mode: DrainAndDelete
  operatingSystem:
    manageKernel: false
`)
	for _, want := range []string{
		"Warning:",
		"spec.chaos.mode: chaos deletes only machines Cluster API makes for the group",
		"spec.operatingSystem.manageKernel: it is deprecated and has no effect",
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("kubectl apply should print %q; it printed:\n%s", want, warnings)
		}
	}
	c := waitInertFields(t, "inert", metav1.ConditionTrue, "spec.chaos.mode", "spec.operatingSystem.manageKernel")
	if c.Reason != "FieldsHaveNoEffect" {
		t.Errorf("reason %q, want FieldsHaveNoEffect", c.Reason)
	}

	// Without them: no warning, and the condition clears.
	warnings = f.KubectlApply(t, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: inert
spec:
  nodeType: Static
`)
	if strings.Contains(warnings, "Warning") {
		t.Errorf("a NodeGroup with no inert field should apply without warnings; kubectl printed:\n%s", warnings)
	}
	waitInertFields(t, "inert", metav1.ConditionFalse)
}

// Deckhouse's documented dedicated-node keys apply silently; a taint in
// node-manager's own key space and another deckhouse.io key apply with a
// warning each.
func TestTemplateKeysDeckhouseDocumentsApplyWithoutWarnings(t *testing.T) {
	t.Parallel()
	deleteGroupAtEnd(t, "system")
	// Published in Deckhouse's node-manager EXAMPLES.md, "System nodes".
	warnings := f.KubectlApply(t, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: system
spec:
  nodeTemplate:
    labels:
      node-role.deckhouse.io/system: ""
    taints:
      - effect: NoExecute
        key: dedicated.deckhouse.io
        value: system
  nodeType: Static
`)
	if strings.Contains(warnings, "Warning") {
		t.Errorf("Deckhouse's documented system NodeGroup should apply without warnings; kubectl printed:\n%s", warnings)
	}

	deleteGroupAtEnd(t, "unwise-keys")
	warnings = f.KubectlApply(t, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: unwise-keys
spec:
  nodeType: Static
  nodeTemplate:
    labels:
      deckhouse.io/custom: ""
    taints:
      - effect: NoSchedule
        key: `+deckhousev1.UninitializedTaint+`
`)
	for _, want := range []string{
		"spec.nodeTemplate.taints: " + deckhousev1.UninitializedTaint + " will not be applied",
		"spec.nodeTemplate: deckhouse.io/custom: Deckhouse reserves the deckhouse.io domain",
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("kubectl apply should print %q; it printed:\n%s", want, warnings)
		}
	}
}
