package clusterapi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

var (
	staticClustersResource         = infrav1alpha1.SchemeGroupVersion.WithResource("staticclusters")
	staticControlPlanesResource    = infrav1alpha1.SchemeGroupVersion.WithResource("staticcontrolplanes")
	staticMachineTemplatesResource = infrav1alpha1.SchemeGroupVersion.WithResource("staticmachinetemplates")
	secretsResource                = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	rolesResource                  = rbacv1.SchemeGroupVersion.WithResource("roles")
	configMapsResource             = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deploymentsResource            = appsv1.SchemeGroupVersion.WithResource("deployments")
)

// syncCluster keeps the Cluster, its StaticCluster, StaticControlPlane and
// kubeconfig Secret. The first two are applied only when missing: their
// spec is empty and their status is CAPS's.
func (c *Controller) syncCluster(ctx context.Context) error {
	ns := c.d.Namespace
	kubeconfig, err := c.kubeconfig()
	if err != nil {
		return err
	}
	wantSecret := KubeconfigSecret(ns, kubeconfig)
	if have, err := c.secrets.Secrets(ns).Get(wantSecret.Name); err != nil || !KubeconfigSecretCurrent(have, wantSecret) {
		if err := c.apply(ctx, secretsResource, wantSecret); err != nil {
			return err
		}
	}
	infra := c.d.NodeManager.InfrastructureV1alpha1()
	if _, err := infra.StaticClusters(ns).Get(ctx, infrav1alpha1.StaticClusterName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if err := c.apply(ctx, staticClustersResource, StaticCluster(ns)); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("reading StaticCluster %s/%s: %w", ns, infrav1alpha1.StaticClusterName, err)
	}
	if _, err := infra.StaticControlPlanes(ns).Get(ctx, infrav1alpha1.StaticClusterName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if err := c.apply(ctx, staticControlPlanesResource, StaticControlPlane(ns)); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("reading StaticControlPlane %s/%s: %w", ns, infrav1alpha1.StaticClusterName, err)
	}
	want := Cluster(ns)
	obj, err := c.clusters.ByNamespace(ns).Get(want.Name)
	if err == nil {
		have := &clusterv1.Cluster{}
		if err := fromUnstructured(obj, have); err == nil && ClusterCurrent(have, want) {
			return nil
		}
	}
	return c.apply(ctx, clustersResource, want)
}

// syncGroup keeps a group's MachineDeployment and StaticMachineTemplate, or
// removes the ones this controller made once the group has no staticInstances.
func (c *Controller) syncGroup(ctx context.Context, group string) error {
	ns := c.d.Namespace
	ng, err := c.groups.Get(group)
	if apierrors.IsNotFound(err) {
		ng = nil
	} else if err != nil {
		return err
	}
	if c.classes != nil {
		// Without a cloud configured (--cloud-cluster), cloud groups' objects
		// are left as they are: a controller started without the flag must
		// not take every cloud machine away.
		if CloudWanted(ng) {
			// A group of the same name that was static before leaves its
			// MachineDeployment and template; they go first.
			if err := c.removeGroup(ctx, group); err != nil {
				return err
			}
			return c.syncCloudGroup(ctx, ng)
		}
		if err := c.removeCloud(ctx, group, nil); err != nil {
			return err
		}
	}
	if !Wanted(ng) {
		return c.removeGroup(ctx, group)
	}
	// CAPS may read the group's bootstrap data before any Machine of the
	// group exists (it is read when a Machine's bootstrap starts).
	if err := c.syncBootstrapDataRole(ctx); err != nil {
		return err
	}
	// The template first: the MachineSets clone it as soon as the
	// MachineDeployment exists.
	wantT := MachineTemplate(ng, ns)
	if have, err := c.templates.StaticMachineTemplates(ns).Get(group); err != nil || !MachineTemplateCurrent(have, wantT) {
		if err := c.apply(ctx, staticMachineTemplatesResource, wantT); err != nil {
			return err
		}
	}
	want := MachineDeployment(ng, ns)
	if obj, err := c.mds.ByNamespace(ns).Get(group); err == nil {
		have := &clusterv1.MachineDeployment{}
		if err := fromUnstructured(obj, have); err == nil && MachineDeploymentCurrent(have, want) {
			return nil
		}
	}
	if err := c.apply(ctx, machineDeploymentsResource, want); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Applied the group's MachineDeployment", "group", group, "machineDeployment", klog.KRef(ns, group),
		"replicas", *want.Spec.Replicas)
	return nil
}

// removeGroup deletes the group's MachineDeployment and template if this
// controller made them (Cluster API then deletes the Machines: drained,
// hosts cleaned and released by CAPS).
func (c *Controller) removeGroup(ctx context.Context, group string) error {
	ns := c.d.Namespace
	if obj, err := c.mds.ByNamespace(ns).Get(group); err == nil {
		if u, ok := obj.(*unstructured.Unstructured); ok && managed(u.GetLabels()) && u.GetDeletionTimestamp() == nil {
			err := c.d.Dynamic.Resource(machineDeploymentsResource).Namespace(ns).Delete(ctx, group, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: ptrUID(u.GetUID())}})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting MachineDeployment %s/%s of a group without staticInstances: %w", ns, group, err)
			}
			klog.FromContext(ctx).Info("Deleted the MachineDeployment of a group without staticInstances", "group", group)
		}
	}
	if t, err := c.templates.StaticMachineTemplates(ns).Get(group); err == nil && managed(t.Labels) && t.DeletionTimestamp == nil &&
		t.Labels[deckhousev1.NodeGroupLabel] == group && t.Annotations[deckhousev1.CloudZoneAnnotation] == "" {
		err := c.d.NodeManager.InfrastructureV1alpha1().StaticMachineTemplates(ns).Delete(ctx, group, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &t.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting StaticMachineTemplate %s/%s of a group without staticInstances: %w", ns, group, err)
		}
	}
	return nil
}

func managed(labels map[string]string) bool {
	return labels[deckhousev1.ManagedByLabel] == deckhousev1.NodeManagerControllerName
}

func ptrUID(u types.UID) *types.UID { return &u }

// syncInstance links an Instance to the Machine backing its node, or, when
// the Instance is being deleted, deletes that Machine and then lets the
// Instance go.
func (c *Controller) syncInstance(ctx context.Context, name string) error {
	inst, err := c.instances.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	machines, err := c.listMachines()
	if err != nil {
		return err
	}
	m := MachineOf(inst, machines)
	switch Decide(inst, m) {
	case Link:
		if !slices.Contains(inst.Finalizers, infrav1alpha1.InstanceMachineFinalizer) {
			if err := c.patchFinalizers(ctx, inst, append(slices.Clone(inst.Finalizers), infrav1alpha1.InstanceMachineFinalizer)); err != nil {
				return err
			}
		}
		if err := c.applyStatus(ctx, name, MachineRef(m), BootstrapStatus(m), LastOperation(m)); err != nil {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Linked the Instance to its Machine", "instance", name, "machine", klog.KObj(m), "phase", m.Status.Phase)
	case DeleteMachine:
		err := c.d.Dynamic.Resource(machinesResource).Namespace(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &m.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Machine %s/%s of deleted Instance %s: %w", m.Namespace, m.Name, name, err)
		}
		klog.FromContext(ctx).Info("Instance deleted: deleting its Machine (Cluster API drains the node, the provider releases the host)",
			"instance", name, "machine", klog.KObj(m))
	case Release:
		// A refusal reported while the Machine was deleted goes with it.
		if inst.Status.LastOperation != nil && inst.Status.MachineRef != nil {
			if err := c.applyStatus(ctx, name, inst.Status.MachineRef, nil, nil); err != nil {
				return err
			}
		}
		kept := slices.DeleteFunc(slices.Clone(inst.Finalizers), func(f string) bool { return f == infrav1alpha1.InstanceMachineFinalizer })
		if err := c.patchFinalizers(ctx, inst, kept); err != nil {
			return err
		}
	}
	return nil
}

// applyStatus applies what this manager says in the Instance's status:
// the machineRef, and the bootstrapStatus and lastOperation when not nil
// (left out, a field this manager applied before is removed).
func (c *Controller) applyStatus(ctx context.Context, name string, ref *deckhousev1alpha1.MachineRef, bs *deckhousev1alpha1.BootstrapStatus, op *deckhousev1alpha1.LastOperation) error {
	status := map[string]any{"machineRef": ref}
	if bs != nil {
		status["bootstrapStatus"] = bs
	}
	if op != nil {
		status["lastOperation"] = op
	}
	body, err := json.Marshal(map[string]any{"apiVersion": deckhousev1alpha1.SchemeGroupVersion.String(), "kind": "Instance",
		"metadata": map[string]any{"name": name}, "status": status})
	if err != nil {
		return err
	}
	force := true
	if _, err := c.d.NodeManager.DeckhouseV1alpha1().Instances().Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: infrav1alpha1.ClusterAPIFieldManager, Force: &force}, "status"); err != nil {
		return fmt.Errorf("writing the machineRef of Instance %s: %w", name, err)
	}
	return nil
}

// patchFinalizers sets the Instance's finalizers, failing if someone
// changed the Instance meanwhile (the resourceVersion is in the patch).
func (c *Controller) patchFinalizers(ctx context.Context, inst *deckhousev1alpha1.Instance, finalizers []string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": inst.ResourceVersion}})
	if err != nil {
		return err
	}
	if _, err := c.d.NodeManager.DeckhouseV1alpha1().Instances().Patch(ctx, inst.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting the finalizers of Instance %s: %w", inst.Name, err)
	}
	return nil
}

func (c *Controller) listMachines() ([]*clusterv1.Machine, error) {
	objs, err := c.machines.ByNamespace(c.d.Namespace).List(everything)
	if err != nil {
		return nil, err
	}
	out := make([]*clusterv1.Machine, 0, len(objs))
	for _, o := range objs {
		m, err := toMachine(o)
		if err != nil {
			return nil, fmt.Errorf("reading Machine: %w", err)
		}
		out = append(out, m)
	}
	return out, nil
}

// apply server-side applies obj (a typed object with its TypeMeta set) as
// ClusterAPIFieldManager. The typed object goes through JSON, which honours
// omitempty and omitzero, so only the fields set here are claimed.
func (c *Controller) apply(ctx context.Context, gvr schema.GroupVersionResource, obj metav1.Object) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(body); err != nil {
		return err
	}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	_, err = c.d.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Apply(ctx, obj.GetName(), u,
		metav1.ApplyOptions{FieldManager: infrav1alpha1.ClusterAPIFieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", gvr.Resource, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}
