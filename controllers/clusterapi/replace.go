package clusterapi

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// Replacement (disruptions.approvalMode RollingUpdate): update approval
// marks a node whose disruptive update it approved with
// RollingUpdateAnnotation instead of letting bashible disrupt it, within
// the group's windows and maxConcurrent. For a node whose Machine belongs
// to a MachineDeployment node-manager keeps, this controller then asks
// Cluster API to roll that MachineDeployment (spec.rollout.after): each of
// its machines made before then is replaced by a new one first, and only
// once the new one is available is the old one drained and deleted, as
// its rolling update allows (maxSurgePerZone up, maxUnavailablePerZone
// down; for a static group's MachineDeployment, one at a time). The new
// machines join with the group's current configuration. Cluster API counts
// a Machine being deleted among the MachineSet's replicas, so replacing a
// single Machine by deleting it would drain it before its successor
// exists; a roll is how Cluster API makes the successor first.

// RolloutFieldManager owns spec.rollout.after on the MachineDeployments,
// apart from the field manager that applies the rest (whose applies leave
// it alone).
const RolloutFieldManager = "node-manager-rolling-update"

// rolloutKey keys a node that update approval marked for replacement by
// its Machine's MachineDeployment.
func (c *Controller) rolloutKey(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok || !nodes.Has(n, deckhousev1.RollingUpdateAnnotation) {
		return ""
	}
	machines, err := c.listMachines()
	if err != nil {
		return ""
	}
	for _, m := range machines {
		if m.Status.NodeRef.Name == n.Name && m.Labels[clusterv1.MachineDeploymentNameLabel] != "" {
			return rolloutPrefix + m.Labels[clusterv1.MachineDeploymentNameLabel]
		}
	}
	return ""
}

// RolloutNeeded reports whether a MachineDeployment rolled after `after`
// (zero: never) must roll again for the machines whose nodes wait for
// replacement: one of them was made at or after it.
func RolloutNeeded(after metav1.Time, waiting []*clusterv1.Machine) bool {
	for _, m := range waiting {
		if after.IsZero() || !m.CreationTimestamp.Before(&after) {
			return true
		}
	}
	return false
}

// syncRollout rolls a MachineDeployment node-manager keeps when a node of
// one of its machines waits for replacement and no roll already covers it.
func (c *Controller) syncRollout(ctx context.Context, name string) error {
	ns := c.d.Namespace
	obj, err := c.mds.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	md := &clusterv1.MachineDeployment{}
	if err := fromUnstructured(obj, md); err != nil {
		return err
	}
	if !managed(md.Labels) || md.DeletionTimestamp != nil {
		return nil
	}
	machines, err := c.listMachines()
	if err != nil {
		return err
	}
	var waiting []*clusterv1.Machine
	var names []string
	for _, m := range machines {
		if m.Labels[clusterv1.MachineDeploymentNameLabel] != name || m.DeletionTimestamp != nil || m.Status.NodeRef.Name == "" {
			continue
		}
		if n, err := c.d.Nodes.Get(m.Status.NodeRef.Name); err == nil && nodes.Has(n, deckhousev1.RollingUpdateAnnotation) {
			waiting = append(waiting, m)
			names = append(names, n.Name)
		}
	}
	if !RolloutNeeded(md.Spec.Rollout.After, waiting) {
		return nil
	}
	now := c.d.Clock.Now().UTC().Truncate(time.Second)
	patch := fmt.Appendf(nil, `{"spec":{"rollout":{"after":%q}}}`, now.Format(time.RFC3339))
	if _, err := c.d.Dynamic.Resource(machineDeploymentsResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: RolloutFieldManager}); err != nil {
		return fmt.Errorf("rolling MachineDeployment %s/%s to replace nodes %v (approvalMode RollingUpdate): %w", ns, name, names, err)
	}
	for _, n := range names {
		if node, err := c.d.Nodes.Get(n); err == nil {
			c.d.Recorder.Eventf(node, nil, corev1.EventTypeNormal, "ReplacementStarted", "RollingUpdate",
				"MachineDeployment %s/%s rolls its machines: a new machine joins before this one is drained and deleted", ns, name)
		}
	}
	klog.FromContext(ctx).Info("Rolling a MachineDeployment to replace nodes (approvalMode RollingUpdate)", "machineDeployment", klog.KRef(ns, name),
		"nodes", names, "after", now)
	return nil
}
