package clusterapi

import (
	"context"
	"fmt"
	"math"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
)

// Standby (cloudInstances.standby): spare capacity kept ready in a
// CloudEphemeral group, as Deckhouse keeps it. The Deployment
// standby-holder-<group> runs one pod per standby node, each on its own node
// of the group, each requesting standbyHolder.overprovisioningRate percent
// (50 by default) of a node's CPU and memory, at the lowest priority
// (StandbyPriorityClass, -1, never preempting): the cluster-autoscaler adds
// nodes for them while they are Pending (it counts pods above its
// expendable cutoff, -10), and any real pod takes their place at once by
// preemption, while the autoscaler adds the next spare node.

// standbyHolderLabel selects a group's holder pods.
const standbyHolderLabel = "app"

// StandbyCount is how many standby nodes the group keeps: standby as a
// number, or as a percentage of its maximum (maxPerZone times its zones),
// rounded down; 0 without standby, and for a group of fixed size
// (minPerZone == maxPerZone: no autoscaler adds nodes for it).
func StandbyCount(ng *deckhousev1.NodeGroup, zones int) (int32, error) {
	ci := ng.Spec.CloudInstances
	if ci == nil || ci.Standby == nil || ci.MaxPerZone <= ci.MinPerZone {
		return 0, nil
	}
	total := int(ci.MaxPerZone) * zones
	n, err := intstr.GetScaledValueFromIntOrPercent(ci.Standby, total, false)
	if err != nil {
		return 0, fmt.Errorf("NodeGroup %s: cloudInstances.standby %q: %w", ng.Name, ci.Standby.String(), err)
	}
	return int32(n), nil
}

// NodeCapacity is what one node of the group offers: the class's capacity
// annotations (cpu and memory), else the smallest allocatable CPU and the
// smallest allocatable memory among the group's Ready nodes (each taken on
// its own, so the answer does not depend on the nodes' order); ok is false
// when neither says.
func NodeCapacity(class *unstructured.Unstructured, groupNodes []*corev1.Node) (corev1.ResourceList, bool) {
	cpu, cerr := resource.ParseQuantity(class.GetAnnotations()[deckhousev1.AutoscalerCapacityPrefix+"cpu"])
	mem, merr := resource.ParseQuantity(class.GetAnnotations()[deckhousev1.AutoscalerCapacityPrefix+"memory"])
	if cerr == nil && merr == nil && cpu.Sign() > 0 && mem.Sign() > 0 {
		return corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}, true
	}
	var out corev1.ResourceList
	for _, n := range groupNodes {
		if !nodes.IsReady(n) {
			continue
		}
		c, m := n.Status.Allocatable[corev1.ResourceCPU], n.Status.Allocatable[corev1.ResourceMemory]
		if c.Sign() <= 0 || m.Sign() <= 0 {
			continue
		}
		if out == nil {
			out = corev1.ResourceList{corev1.ResourceCPU: c, corev1.ResourceMemory: m}
			continue
		}
		if c.Cmp(out[corev1.ResourceCPU]) < 0 {
			out[corev1.ResourceCPU] = c
		}
		if m.Cmp(out[corev1.ResourceMemory]) < 0 {
			out[corev1.ResourceMemory] = m
		}
	}
	return out, out != nil
}

// StandbyRequests is rate percent of capacity, CPU in millicores and
// memory in bytes, rounded down.
func StandbyRequests(capacity corev1.ResourceList, rate int32) corev1.ResourceList {
	cpu, mem := capacity[corev1.ResourceCPU], capacity[corev1.ResourceMemory]
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(cpu.MilliValue()*int64(rate)/100, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(math.Floor(float64(mem.Value())*float64(rate)/100)), resource.BinarySI),
	}
}

// StandbyHolder is the group's holder Deployment: replicas pods on the
// group's nodes, one per node, tolerating the group's taints, each
// requesting requests.
func StandbyHolder(ng *deckhousev1.NodeGroup, namespace string, replicas int32, requests corev1.ResourceList) *appsv1.Deployment {
	name := deckhousev1.StandbyHolderPrefix + ng.Name
	selector := map[string]string{standbyHolderLabel: deckhousev1.StandbyHolderContainer, deckhousev1.NodeGroupLabel: ng.Name}
	var tolerations []corev1.Toleration
	for _, t := range nodetemplate.Desired(ng).Taints {
		tolerations = append(tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: t.Effect})
	}
	labels := groupLabels(ng.Name)
	labels[standbyHolderLabel] = deckhousev1.StandbyHolderContainer
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: selector},
				Spec: corev1.PodSpec{
					PriorityClassName:             deckhousev1.StandbyPriorityClass,
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					NodeSelector:                  map[string]string{deckhousev1.NodeGroupLabel: ng.Name},
					Tolerations:                   tolerations,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: selector}, TopologyKey: corev1.LabelHostname}},
					}},
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65535),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:      deckhousev1.StandbyHolderContainer,
						Image:     deckhousev1.StandbyHolderImage,
						Resources: corev1.ResourceRequirements{Requests: requests},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
}

// standbyHolderCurrent reports whether have is want as far as want says.
func standbyHolderCurrent(have, want *appsv1.Deployment) bool {
	hs, ws := have.Spec.Template.Spec, want.Spec.Template.Spec
	return ptr.Equal(have.Spec.Replicas, want.Spec.Replicas) && containsLabels(have.Labels, want.Labels) &&
		len(hs.Containers) == 1 && hs.Containers[0].Image == ws.Containers[0].Image &&
		apiequality.Semantic.DeepEqual(hs.Containers[0].Resources.Requests, ws.Containers[0].Resources.Requests) &&
		apiequality.Semantic.DeepEqual(hs.Tolerations, ws.Tolerations) && apiequality.Semantic.DeepEqual(hs.NodeSelector, ws.NodeSelector)
}

// syncStandby keeps the group's standby holder, or deletes it when the
// group keeps no standby.
func (c *Controller) syncStandby(ctx context.Context, ng *deckhousev1.NodeGroup, class *unstructured.Unstructured, zones int) error {
	ns, name := c.d.Namespace, deckhousev1.StandbyHolderPrefix+ng.Name
	count, err := StandbyCount(ng, zones)
	if err != nil {
		return err
	}
	if count == 0 {
		return c.removeStandby(ctx, ng.Name)
	}
	groupNodes, err := c.d.Nodes.InGroup(ng.Name)
	if err != nil {
		return err
	}
	capacity, ok := NodeCapacity(class, groupNodes)
	if !ok {
		return fmt.Errorf("CloudEphemeral group %s keeps %d standby nodes, but the size of a node is unknown: annotate its class %s with %scpu and %smemory "+
			"(a node's capacity; the autoscaler reads them too), or let one node of the group join", ng.Name, count, class.GetName(),
			deckhousev1.AutoscalerCapacityPrefix, deckhousev1.AutoscalerCapacityPrefix)
	}
	rate := int32(50)
	if h := ng.Spec.CloudInstances.StandbyHolder; h != nil && h.OverprovisioningRate != nil {
		rate = *h.OverprovisioningRate
	}
	want := StandbyHolder(ng, ns, count, StandbyRequests(capacity, rate))
	have, err := c.deployments.Lister().Deployments(ns).Get(name)
	switch {
	case err == nil && !managed(have.Labels):
		return fmt.Errorf("CloudEphemeral group %s: Deployment %s/%s, the name of its standby holder, is not node-manager's; rename or delete it", ng.Name, ns, name)
	case err == nil && standbyHolderCurrent(have, want):
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Deployment %s/%s, group %s's standby holder: %w", ns, name, ng.Name, err)
	}
	if err := c.apply(ctx, deploymentsResource, want); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Applied the group's standby holder", "group", ng.Name, "deployment", klog.KObj(want), "standby", count,
		"requests", want.Spec.Template.Spec.Containers[0].Resources.Requests)
	return nil
}

// removeStandby deletes the group's standby holder, if node-manager made it.
func (c *Controller) removeStandby(ctx context.Context, group string) error {
	ns, name := c.d.Namespace, deckhousev1.StandbyHolderPrefix+group
	have, err := c.deployments.Lister().Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Deployment %s/%s, group %s's standby holder: %w", ns, name, group, err)
	}
	if !managed(have.Labels) || have.Labels[deckhousev1.NodeGroupLabel] != group {
		return nil
	}
	err = c.d.Kube.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Deployment %s/%s, group %s's standby holder: %w", ns, name, group, err)
	}
	klog.FromContext(ctx).Info("Deleted the group's standby holder", "group", group, "deployment", klog.KRef(ns, name))
	return nil
}
