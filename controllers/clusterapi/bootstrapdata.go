package clusterapi

import (
	"context"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// caps-controller-manager reads the bootstrap data of the Machines it
// bootstraps: the Secret a Machine's spec.bootstrap.dataSecretName names,
// which for the groups' MachineDeployments is manual-bootstrap-for-<group>.
// RBAC cannot grant a name prefix, and a namespace-wide get would give it
// every Secret of the namespace (bashible-apiserver's serving key, the
// fencing keyrings, the bootstrap tokens of groups that are not static), so
// this controller keeps the Role deckhousev1.CAPSBootstrapDataRole (bound to
// caps-controller-manager by its manifests) listing exactly the current
// Secrets by name. node-manager-controller may grant that get because it
// holds get on the namespace's Secrets itself (RBAC's escalation check).

// BootstrapDataSecrets are the bootstrap-data Secrets of the groups wired
// to Cluster API (Wanted), sorted.
func BootstrapDataSecrets(groups []*deckhousev1.NodeGroup) []string {
	var names []string
	for _, ng := range groups {
		if Wanted(ng) {
			names = append(names, deckhousev1.ManualBootstrapSecretPrefix+ng.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// BootstrapDataRole is the Role that lets caps-controller-manager get the
// Secrets named, and no other. With no name it has no rule at all: a rule
// with an empty resourceNames would match every Secret.
func BootstrapDataRole(namespace string, secrets []string) *rbacv1.Role {
	rules := []rbacv1.PolicyRule{}
	if len(secrets) > 0 {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"},
			Verbs: []string{"get"}, ResourceNames: slices.Clone(secrets)})
	}
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.CAPSBootstrapDataRole, Namespace: namespace, Labels: managedLabels()},
		Rules:      rules,
	}
}

// BootstrapDataRoleCurrent reports whether have grants exactly what want
// does (nil and empty rules alike) and carries want's labels.
func BootstrapDataRoleCurrent(have, want *rbacv1.Role) bool {
	if len(have.Rules) == 0 && len(want.Rules) == 0 {
		return containsLabels(have.Labels, want.Labels)
	}
	return containsLabels(have.Labels, want.Labels) && apiequality.Semantic.DeepEqual(have.Rules, want.Rules)
}

// syncBootstrapDataRole brings the Role up to date with the groups in the
// cache. It is serialized, so a sync that read the groups earlier never
// writes after one that read them later; syncGroup calls it before it
// applies a group's MachineDeployment, so a new group's Secret is readable
// by CAPS before any of its Machines exists.
func (c *Controller) syncBootstrapDataRole(ctx context.Context) error {
	c.roleMu.Lock()
	defer c.roleMu.Unlock()
	ns := c.d.Namespace
	groups, err := c.groups.List(everything)
	if err != nil {
		return err
	}
	secrets := BootstrapDataSecrets(groups)
	want := BootstrapDataRole(ns, secrets)
	have, err := c.d.Kube.RbacV1().Roles(ns).Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case err == nil && BootstrapDataRoleCurrent(have, want):
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Role %s/%s (caps-controller-manager's bootstrap-data Secrets): %w", ns, want.Name, err)
	}
	if err := c.apply(ctx, rolesResource, want); err != nil {
		return fmt.Errorf("granting caps-controller-manager its bootstrap-data Secrets %v: %w", secrets, err)
	}
	klog.FromContext(ctx).Info("Updated the bootstrap-data Secrets caps-controller-manager may read", "role", klog.KObj(want), "secrets", secrets)
	return nil
}
