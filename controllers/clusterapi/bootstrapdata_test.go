package clusterapi

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Only the groups wired to Cluster API lend CAPS their bootstrap data.
func TestBootstrapDataSecrets(t *testing.T) {
	without := staticGroup("manual", 1, nil)
	without.Spec.StaticInstances = nil
	ephemeral := staticGroup("cloud", 1, nil)
	ephemeral.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
	deleting := staticGroup("going", 1, nil)
	deleting.DeletionTimestamp = &deleting.CreationTimestamp
	got := BootstrapDataSecrets([]*deckhousev1.NodeGroup{staticGroup("workers", 2, nil), without, ephemeral, deleting, staticGroup("db", 0, nil)})
	want := []string{deckhousev1.ManualBootstrapSecretPrefix + "db", deckhousev1.ManualBootstrapSecretPrefix + "workers"}
	if !slices.Equal(got, want) {
		t.Errorf("BootstrapDataSecrets = %v, want %v", got, want)
	}
}

// The Role grants get on the Secrets named and nothing else; with no name
// it has no rule (an empty resourceNames would match every Secret).
func TestBootstrapDataRole(t *testing.T) {
	secrets := []string{deckhousev1.ManualBootstrapSecretPrefix + "workers"}
	r := BootstrapDataRole(ns, secrets)
	if r.Name != deckhousev1.CAPSBootstrapDataRole || r.Namespace != ns || !managed(r.Labels) {
		t.Errorf("Role %s/%s labels %v", r.Namespace, r.Name, r.Labels)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: secrets}}
	if !slices.EqualFunc(r.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
			slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames) && len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("rules %+v, want %+v", r.Rules, want)
	}
	empty := BootstrapDataRole(ns, nil)
	if empty.Rules == nil || len(empty.Rules) != 0 {
		t.Errorf("with no group the Role must have an empty (not nil, not wide) rule list: %+v", empty.Rules)
	}

	if !BootstrapDataRoleCurrent(r.DeepCopy(), r) {
		t.Error("an identical Role is not current")
	}
	if BootstrapDataRoleCurrent(empty, r) || BootstrapDataRoleCurrent(r, empty) {
		t.Error("a Role granting other Secrets is current")
	}
	other := r.DeepCopy()
	other.Rules[0].ResourceNames = nil // every Secret
	if BootstrapDataRoleCurrent(other, r) {
		t.Error("a Role granting every Secret is current")
	}
	noRules := empty.DeepCopy()
	noRules.Rules = nil
	if !BootstrapDataRoleCurrent(noRules, empty) {
		t.Error("nil and empty rules differ")
	}
	unlabelled := r.DeepCopy()
	unlabelled.Labels = nil
	if BootstrapDataRoleCurrent(unlabelled, r) {
		t.Error("a Role without the managed-by label is current")
	}
}
