package clusterapi

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
)

// What a CloudEphemeral group's MachineDeployments tell the standard
// cluster-autoscaler beyond their sizes (its Cluster API provider,
// --cloud-provider=clusterapi; the keys are in
// kubernetes/autoscaler cluster-autoscaler/cloudprovider/clusterapi,
// clusterapi_utils.go and clusterapi_unstructured.go).

// Capacity annotation keys under deckhousev1.AutoscalerCapacityPrefix that
// node-manager writes from the group; the others (cpu, memory,
// ephemeral-disk, gpu-type, gpu-count, …) come from the class.
const (
	capacityLabels  = deckhousev1.AutoscalerCapacityPrefix + "labels"
	capacityTaints  = deckhousev1.AutoscalerCapacityPrefix + "taints"
	capacityMaxPods = deckhousev1.AutoscalerCapacityPrefix + "maxPods"
)

// CapacityAnnotations is what the autoscaler needs to scale a zone from
// zero, when no node of it exists to look at: the labels and taints its
// nodes get (the group's node template, with the labels node-manager adds:
// group, type and role), its kubelet's maxPods when the group sets it, and
// the class's own annotations under the capacity prefix (cpu and memory,
// which the autoscaler needs at least, unless the provider reports them in
// the template's status.capacity, which the autoscaler also reads).
func CapacityAnnotations(ng *deckhousev1.NodeGroup, class *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	for k, v := range class.GetAnnotations() {
		if strings.HasPrefix(k, deckhousev1.AutoscalerCapacityPrefix) && k != capacityLabels && k != capacityTaints {
			out[k] = v
		}
	}
	tpl := nodetemplate.Desired(ng)
	labels := maps.Clone(tpl.Labels)
	labels[deckhousev1.NodeGroupLabel] = ng.Name
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	out[capacityLabels] = strings.Join(pairs, ",")
	if len(tpl.Taints) > 0 {
		var taints []string
		for _, t := range tpl.Taints {
			s := t.Key
			if t.Value != "" {
				s += "=" + t.Value
			}
			taints = append(taints, s+":"+string(t.Effect))
		}
		slices.Sort(taints)
		out[capacityTaints] = strings.Join(taints, ",")
	}
	if k := ng.Spec.Kubelet; k != nil && k.MaxPods != nil {
		out[capacityMaxPods] = strconv.Itoa(int(*k.MaxPods))
	}
	return out
}

// capacityCurrent reports whether have carries exactly the capacity
// annotations of want: a label or taint the group drops must go too.
func capacityCurrent(have, want map[string]string) bool {
	for k, v := range have {
		if strings.HasPrefix(k, deckhousev1.AutoscalerCapacityPrefix) && want[k] != v {
			return false
		}
	}
	return true
}

// Priorities is the priority expander's configuration (the value of
// deckhousev1.AutoscalerPrioritiesKey) for the CloudEphemeral groups: each
// group's MachineDeployments, as the autoscaler names them
// (MachineDeployment/<namespace>/<name>), at the group's priority, 0 when
// it sets none. The expander leaves out any MachineDeployment the
// configuration does not list, so every group is listed.
func Priorities(namespace string, groups []*deckhousev1.NodeGroup) string {
	byPriority := map[int32][]string{}
	for _, ng := range groups {
		p := derefOr(ng.Spec.CloudInstances.Priority, 0)
		byPriority[p] = append(byPriority[p], "^"+regexp.QuoteMeta("MachineDeployment/"+namespace+"/"+ng.Name+"-")+"[0-9a-f]{8}$")
	}
	var b strings.Builder
	for _, p := range slices.Backward(slices.Sorted(maps.Keys(byPriority))) {
		fmt.Fprintf(&b, "%d:\n", p)
		res := byPriority[p]
		slices.Sort(res)
		for _, re := range res {
			// Single-quoted YAML: the expressions hold no quote (group
			// names are DNS subdomains).
			fmt.Fprintf(&b, "  - '%s'\n", re)
		}
	}
	return b.String()
}

// priorityExpanderConfigMap is the priority expander's configuration for
// groups.
func priorityExpanderConfigMap(namespace string, groups []*deckhousev1.NodeGroup) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.AutoscalerPriorityExpanderConfigMap, Namespace: namespace, Labels: managedLabels()},
		Data:       map[string]string{deckhousev1.AutoscalerPrioritiesKey: Priorities(namespace, groups)},
	}
}

// syncPriorityExpander keeps the priority expander's ConfigMap while a
// CloudEphemeral group gets machines here, and deletes it (when it is
// node-manager's) once none does.
func (c *Controller) syncPriorityExpander(ctx context.Context) error {
	if c.classes == nil {
		return nil // no cloud here: a ConfigMap of that name is someone else's
	}
	ns, name := c.d.Namespace, deckhousev1.AutoscalerPriorityExpanderConfigMap
	all, err := c.groups.List(everything)
	if err != nil {
		return err
	}
	var groups []*deckhousev1.NodeGroup
	for _, ng := range all {
		if CloudWanted(ng) {
			groups = append(groups, ng)
		}
	}
	have, err := c.d.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading ConfigMap %s/%s (the autoscaler's priority expander): %w", ns, name, err)
	}
	if len(groups) == 0 {
		if err != nil || !managed(have.Labels) {
			return nil
		}
		err := c.d.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ConfigMap %s/%s, no CloudEphemeral group left: %w", ns, name, err)
		}
		return nil
	}
	want := priorityExpanderConfigMap(ns, groups)
	if err == nil && maps.Equal(have.Data, want.Data) && containsLabels(have.Labels, want.Labels) {
		return nil
	}
	if err := c.apply(ctx, configMapsResource, want); err != nil {
		return fmt.Errorf("writing the autoscaler's priority expander configuration: %w", err)
	}
	klog.FromContext(ctx).Info("Wrote the groups' priorities for the autoscaler's priority expander", "configMap", klog.KObj(want), "groups", len(groups))
	return nil
}
