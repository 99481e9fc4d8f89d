package fencingagents

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// sync makes group's DaemonSet what the group asks for: present with the
// wanted spec while the group has spec.fencing, absent otherwise.
func (c *Controller) sync(ctx context.Context, group string) error {
	var want *appsv1.DaemonSet
	ng, err := c.groups.Get(group)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		want = DaemonSet(ng, c.d.Namespace, c.opts.Image)
	}
	have, err := c.daemonSets.DaemonSets(c.d.Namespace).Get(DaemonSetName(group))
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if apierrors.IsNotFound(err) {
		have = nil
	}
	// The keyring before the DaemonSet, whose pods mount it.
	if err := c.syncKey(ctx, group, want != nil); err != nil {
		return err
	}
	api := c.d.Kube.AppsV1().DaemonSets(c.d.Namespace)
	opts := metav1.CreateOptions{FieldManager: deckhousev1.NodeManagerControllerName}
	switch {
	case want == nil && have == nil:
		return nil
	case want == nil:
		if have.Labels[deckhousev1.ManagedByLabel] != deckhousev1.NodeManagerControllerName {
			return nil // not ours
		}
		if err := api.Delete(ctx, have.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting DaemonSet %s/%s of group %s, which has no spec.fencing: %w", c.d.Namespace, have.Name, group, err)
		}
		klog.FromContext(ctx).Info("Deleted the fencing agents of a group without fencing", "group", group, "daemonSet", have.Name)
	case have == nil:
		if _, err := api.Create(ctx, want, opts); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DaemonSet %s/%s for fenced group %s: %w", c.d.Namespace, want.Name, group, err)
		}
		klog.FromContext(ctx).Info("Created the fencing agents of a fenced group", "group", group, "daemonSet", want.Name, "mode", ng.Spec.Fencing.Mode)
	case !UpToDate(have, want):
		if waiting, err := c.legacyWaits(ctx, have, group); err != nil || len(waiting) > 0 {
			return err
		}
		upd := have.DeepCopy()
		upd.Labels = want.Labels
		upd.Spec = want.Spec
		if _, err := api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
			return fmt.Errorf("updating DaemonSet %s/%s of fenced group %s: %w", c.d.Namespace, want.Name, group, err)
		}
		klog.FromContext(ctx).Info("Updated the fencing agents of a fenced group", "group", group, "daemonSet", want.Name, "mode", ng.Spec.Fencing.Mode)
	}
	return nil
}

// UpToDate reports whether have is want as the API stores it: every
// field want sets is set alike in have (the API's defaults for fields
// want leaves empty do not count as differences).
func UpToDate(have, want *appsv1.DaemonSet) bool {
	return equality.Semantic.DeepDerivative(want.Labels, have.Labels) && equality.Semantic.DeepDerivative(want.Spec, have.Spec)
}

// legacyNodeSelector is what DaemonSets made before the restricted group
// label selected their nodes by: the label a kubelet may write itself.
func legacyNodeSelector(group string) map[string]string {
	return map[string]string{deckhousev1.NodeGroupLabel: group}
}

// legacyWaits lists the members of group (by their Instances) whose Node
// does not carry the restricted group label yet, when have is a DaemonSet
// that still selects by the legacy label; nil otherwise. Such a DaemonSet
// is left as it is until every member carries the label (the node
// template controller sets it within seconds of an upgrade): moved to the
// new selector earlier, it would take the agents off those nodes at once,
// disarming them, until the label came. Each member's label change queues
// the group again.
func (c *Controller) legacyWaits(ctx context.Context, have *appsv1.DaemonSet, group string) ([]string, error) {
	if !equality.Semantic.DeepEqual(have.Spec.Template.Spec.NodeSelector, legacyNodeSelector(group)) {
		return nil, nil
	}
	members, err := c.d.Nodes.InGroup(group)
	if err != nil {
		return nil, err
	}
	var waiting []string
	for _, n := range members {
		if n.Labels[deckhousev1.NodeGroupRestrictedLabel] != group {
			waiting = append(waiting, n.Name)
		}
	}
	if len(waiting) > 0 {
		klog.FromContext(ctx).Info("The fencing agents' DaemonSet still selects nodes by their own group label; it is updated once every node of the group carries the restricted group label, which node-manager-controller's node template controller sets from each node's Instance",
			"group", group, "daemonSet", have.Name, "label", deckhousev1.NodeGroupRestrictedLabel, "waiting", waiting)
	}
	return waiting, nil
}
