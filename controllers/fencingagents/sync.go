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
		want = DaemonSet(ng, c.d.Namespace, c.d.Options.FencingAgentImage)
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
		klog.InfoS("Deleted the fencing agents of a group without fencing", "group", group, "daemonSet", have.Name)
	case have == nil:
		if _, err := api.Create(ctx, want, opts); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DaemonSet %s/%s for fenced group %s: %w", c.d.Namespace, want.Name, group, err)
		}
		klog.InfoS("Created the fencing agents of a fenced group", "group", group, "daemonSet", want.Name, "mode", ng.Spec.Fencing.Mode)
	case !UpToDate(have, want):
		upd := have.DeepCopy()
		upd.Labels = want.Labels
		upd.Spec = want.Spec
		if _, err := api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
			return fmt.Errorf("updating DaemonSet %s/%s of fenced group %s: %w", c.d.Namespace, want.Name, group, err)
		}
		klog.InfoS("Updated the fencing agents of a fenced group", "group", group, "daemonSet", want.Name, "mode", ng.Spec.Fencing.Mode)
	}
	return nil
}

// UpToDate reports whether have is want as the API stores it: every
// field want sets is set alike in have (the API's defaults for fields
// want leaves empty do not count as differences).
func UpToDate(have, want *appsv1.DaemonSet) bool {
	return equality.Semantic.DeepDerivative(want.Labels, have.Labels) && equality.Semantic.DeepDerivative(want.Spec, have.Spec)
}
