package clusterapi

import (
	"context"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// cloud is the installation's cloud settings, with the cluster's UUID
// (--cluster-uuid, or the UID of the provider's Cluster).
func (c *Controller) cloud() (Cloud, error) {
	cl := Cloud{Cluster: c.opts.CloudCluster, TemplateAPIVersion: c.classGVR.GroupVersion().String(), Zones: c.opts.CloudZones, UUID: c.opts.ClusterUUID}
	if cl.UUID != "" {
		return cl, nil
	}
	obj, err := c.clusters.ByNamespace(c.d.Namespace).Get(c.opts.CloudCluster)
	if err != nil {
		return cl, fmt.Errorf("reading the cloud provider's Cluster %s/%s (--cloud-cluster), whose UID names the machines: %w; "+
			"the provider's installation makes it, or set --cluster-uuid", c.d.Namespace, c.opts.CloudCluster, err)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetUID() == "" {
		return cl, fmt.Errorf("the cloud provider's Cluster %s/%s has no UID", c.d.Namespace, c.opts.CloudCluster)
	}
	cl.UUID = string(u.GetUID())
	return cl, nil
}

// syncCloudGroup keeps a CloudEphemeral group's copy of its class and
// MachineDeployment in each of its zones, and removes those of zones it no
// longer has.
func (c *Controller) syncCloudGroup(ctx context.Context, ng *deckhousev1.NodeGroup) error {
	ns := c.d.Namespace
	cloud, err := c.cloud()
	if err != nil {
		return err
	}
	zones := cloud.ZonesOf(ng)
	if len(zones) == 0 {
		return fmt.Errorf("CloudEphemeral group %s names no zone (cloudInstances.zones) and the installation none (--cloud-zones): "+
			"it gets no machines until one of them does", ng.Name)
	}
	ref := ng.Spec.CloudInstances.ClassReference
	obj, err := c.classes.ByNamespace(ns).Get(ref.Name)
	if err != nil {
		return fmt.Errorf("CloudEphemeral group %s: reading its class %s %s/%s (a %s of the cloud provider, cloudInstances.classReference): %w",
			ng.Name, ref.Kind, ns, ref.Name, c.classGVR.Resource, err)
	}
	class, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object %T for class %s", obj, ref.Name)
	}
	if class.GetKind() != ref.Kind {
		return fmt.Errorf("CloudEphemeral group %s: cloudInstances.classReference.kind is %s, but %s/%s is a %s (the provider's machine templates, --cloud-machine-template)",
			ng.Name, ref.Kind, ns, ref.Name, class.GetKind())
	}
	checksum, err := ClassChecksum(class)
	if err != nil {
		return err
	}
	if err := c.checkNames(ng.Name, cloud, zones); err != nil {
		return err
	}
	capacity := CapacityAnnotations(ng, class)
	keep := map[string]bool{}
	var machines int32
	for _, zone := range zones {
		tpl := cloud.ClassTemplate(ng, class, zone, checksum, ns)
		keep[tpl.GetName()] = true
		if obj, err := c.classes.ByNamespace(ns).Get(tpl.GetName()); err == nil {
			// Never adopt an object of that name that is not this copy.
			if u, ok := obj.(*unstructured.Unstructured); !ok || !managed(u.GetLabels()) || u.GetLabels()[deckhousev1.NodeGroupLabel] != ng.Name ||
				u.GetAnnotations()[deckhousev1.CloudZoneAnnotation] != zone {
				return fmt.Errorf("CloudEphemeral group %s: %s %s/%s, the name of its copy of the class for zone %s, is taken by an object node-manager did not make for it; rename or delete that object",
					ng.Name, c.classGVR.Resource, ns, tpl.GetName(), zone)
			}
		} else if apierrors.IsNotFound(err) {
			// The template first: the MachineSets clone it as soon as the
			// MachineDeployment refers to it. Copies are never changed: a
			// new content is a new name.
			if _, err := c.d.Dynamic.Resource(c.classGVR).Namespace(ns).Apply(ctx, tpl.GetName(), tpl,
				metav1.ApplyOptions{FieldManager: infrav1alpha1.ClusterAPIFieldManager, Force: true}); err != nil {
				return fmt.Errorf("applying %s %s/%s, group %s's copy of its class for zone %s: %w", c.classGVR.Resource, ns, tpl.GetName(), ng.Name, zone, err)
			}
		} else if err != nil {
			return err
		}
		name := cloud.MachineDeploymentName(ng.Name, zone)
		keep[name] = true
		var current *int32
		have := &clusterv1.MachineDeployment{}
		obj, err := c.mds.ByNamespace(ns).Get(name)
		if err == nil {
			if err := fromUnstructured(obj, have); err != nil {
				return err
			}
			current = have.Spec.Replicas
		}
		want := cloud.CloudMachineDeployment(ng, zone, tpl.GetName(), checksum, ns, Replicas(ng.Spec.CloudInstances, current), capacity)
		machines += *want.Spec.Replicas
		if err == nil && CloudMachineDeploymentCurrent(have, want) {
			continue
		}
		if err := c.apply(ctx, machineDeploymentsResource, want); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Applied the group's MachineDeployment for a zone", "group", ng.Name, "zone", zone,
			"machineDeployment", klog.KRef(ns, name), "replicas", *want.Spec.Replicas, "template", tpl.GetName())
	}
	if err := c.removeCloud(ctx, ng.Name, keep); err != nil {
		return err
	}
	if err := c.syncHealthCheck(ctx, ng, cloud, machines); err != nil {
		return err
	}
	return c.syncStandby(ctx, ng, class, len(zones))
}

// syncHealthCheck keeps the group's MachineHealthCheck, for a group of
// the given number of machines.
func (c *Controller) syncHealthCheck(ctx context.Context, ng *deckhousev1.NodeGroup, cloud Cloud, machines int32) error {
	ns := c.d.Namespace
	want := cloud.CloudMachineHealthCheck(ng, ns, machines, int32(c.opts.MachineLostAfter.Seconds()), int32(c.opts.MachineStartupTimeout.Seconds()))
	obj, err := c.d.Dynamic.Resource(machineHealthChecksResource).Namespace(ns).Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case err == nil && (!managed(obj.GetLabels()) || obj.GetLabels()[deckhousev1.NodeGroupLabel] != ng.Name):
		return fmt.Errorf("CloudEphemeral group %s: MachineHealthCheck %s/%s is not node-manager's; rename or delete it", ng.Name, ns, want.Name)
	case err == nil:
		have := &clusterv1.MachineHealthCheck{}
		if err := fromUnstructured(obj, have); err != nil {
			return err
		}
		// The fields node-manager sets (Cluster API's webhook defaults others).
		h, w := have.Spec, want.Spec
		if h.ClusterName == w.ClusterName && apiequality.Semantic.DeepEqual(h.Selector, w.Selector) &&
			apiequality.Semantic.DeepEqual(h.Checks, w.Checks) && apiequality.Semantic.DeepEqual(h.Remediation.TriggerIf, w.Remediation.TriggerIf) {
			return nil
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading MachineHealthCheck %s/%s of group %s: %w", ns, want.Name, ng.Name, err)
	}
	return c.apply(ctx, machineHealthChecksResource, want)
}

// checkNames refuses to go on when a wanted zone of the group already has
// a MachineDeployment under another name: the cluster's UUID changed
// (--cluster-uuid, or the cloud Cluster's UID), which renames every
// MachineDeployment; replacing them would drain every machine of the
// group at once.
func (c *Controller) checkNames(group string, cloud Cloud, zones []string) error {
	mds, err := c.mds.ByNamespace(c.d.Namespace).List(labels.SelectorFromSet(groupLabels(group)))
	if err != nil {
		return err
	}
	for _, obj := range mds {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		zone := u.GetAnnotations()[deckhousev1.CloudZoneAnnotation]
		if want := cloud.MachineDeploymentName(group, zone); zone != "" && slices.Contains(zones, zone) && u.GetName() != want {
			return fmt.Errorf("CloudEphemeral group %s: zone %s has MachineDeployment %s/%s, and would now have %s: the cluster's UUID changed "+
				"(--cluster-uuid, or the UID of Cluster %s). Nothing is changed, since replacing them would drain every machine of the group at once: "+
				"set --cluster-uuid to the UUID the machines were named with, or delete the old MachineDeployments to replace the machines",
				group, zone, c.d.Namespace, u.GetName(), want, c.opts.CloudCluster)
		}
	}
	return nil
}

// removeCloud deletes the group's MachineDeployments and class copies this
// controller made for a cloud group, but those in keep (a static group's
// MachineDeployment, named after the group, is not one of them) and the
// copies a MachineSet still clones from. Cluster API then drains and
// deletes their Machines, and the provider the machines.
func (c *Controller) removeCloud(ctx context.Context, group string, keep map[string]bool) error {
	ns := c.d.Namespace
	selector := labels.SelectorFromSet(groupLabels(group))
	mds, err := c.mds.ByNamespace(ns).List(selector)
	if err != nil {
		return err
	}
	for _, obj := range mds {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetName() == group || keep[u.GetName()] || u.GetDeletionTimestamp() != nil || u.GetAnnotations()[deckhousev1.CloudZoneAnnotation] == "" {
			continue
		}
		err := c.d.Dynamic.Resource(machineDeploymentsResource).Namespace(ns).Delete(ctx, u.GetName(), metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: ptrUID(u.GetUID())}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting MachineDeployment %s/%s of group %s: %w", ns, u.GetName(), group, err)
		}
		klog.FromContext(ctx).Info("Deleted a MachineDeployment of a zone the group no longer has", "group", group,
			"machineDeployment", klog.KRef(ns, u.GetName()), "zone", u.GetAnnotations()[deckhousev1.CloudZoneAnnotation])
	}
	if c.classes == nil {
		return nil
	}
	if keep == nil {
		if err := c.removeStandby(ctx, group); err != nil {
			return err
		}
		if err := c.removeHealthCheck(ctx, group); err != nil {
			return err
		}
	}
	copies, err := c.classes.ByNamespace(ns).List(selector)
	if err != nil {
		return err
	}
	inUse, err := c.clonedTemplates()
	if err != nil {
		return err
	}
	for _, obj := range copies {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil || u.GetAnnotations()[deckhousev1.CloudZoneAnnotation] == "" {
			continue // a static group's StaticMachineTemplate, when the provider is CAPS itself
		}
		if keep[u.GetName()] || inUse[u.GetName()] {
			// Still wanted, or a MachineSet still clones machines from it
			// (the old one of a roll, until Cluster API removes it).
			continue
		}
		err := c.d.Dynamic.Resource(c.classGVR).Namespace(ns).Delete(ctx, u.GetName(), metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: ptrUID(u.GetUID())}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s/%s, a copy of group %s's class: %w", c.classGVR.Resource, ns, u.GetName(), group, err)
		}
	}
	return nil
}

// clonedTemplates are the names of the provider templates some MachineSet
// of the namespace clones its machines from.
func (c *Controller) clonedTemplates() (map[string]bool, error) {
	sets, err := c.machineSets.ByNamespace(c.d.Namespace).List(everything)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, obj := range sets {
		ms := &clusterv1.MachineSet{}
		if err := fromUnstructured(obj, ms); err != nil {
			return nil, err
		}
		if name := ms.Spec.Template.Spec.InfrastructureRef.Name; name != "" {
			out[name] = true
		}
	}
	return out, nil
}

// removeHealthCheck deletes the group's MachineHealthCheck, if
// node-manager made it.
func (c *Controller) removeHealthCheck(ctx context.Context, group string) error {
	ns := c.d.Namespace
	obj, err := c.d.Dynamic.Resource(machineHealthChecksResource).Namespace(ns).Get(ctx, group, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading MachineHealthCheck %s/%s of group %s: %w", ns, group, group, err)
	}
	if !managed(obj.GetLabels()) || obj.GetLabels()[deckhousev1.NodeGroupLabel] != group {
		return nil
	}
	err = c.d.Dynamic.Resource(machineHealthChecksResource).Namespace(ns).Delete(ctx, group, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptrUID(obj.GetUID())}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting MachineHealthCheck %s/%s of group %s: %w", ns, group, group, err)
	}
	return nil
}
