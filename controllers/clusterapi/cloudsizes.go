package clusterapi

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// CloudSizes is what NodeGroup status reports of a CloudEphemeral group's
// size, read from the group's MachineDeployments: it is given to the status
// controller, which shares this controller's informer.
type CloudSizes struct {
	zones     []string
	namespace string
	mds       cache.GenericLister
	informer  cache.SharedIndexInformer
	// machines are read for the groups' failed machines, deployments for
	// their standby holders.
	machines            cache.GenericLister
	machinesInformer    cache.SharedIndexInformer
	deployments         appslisters.DeploymentLister
	deploymentsInformer cache.SharedIndexInformer
}

// CloudSizes is nil unless CloudEphemeral groups get machines here
// (--cluster-api and --cloud-cluster).
func (c *Controller) CloudSizes() *CloudSizes {
	if !c.enabled || c.classes == nil {
		return nil
	}
	return &CloudSizes{zones: c.opts.CloudZones, namespace: c.d.Namespace, mds: c.mds,
		informer: c.capi.ForResource(machineDeploymentsResource).Informer(),
		machines: c.machines, machinesInformer: c.capi.ForResource(machinesResource).Informer(),
		deployments: c.deployments.Lister(), deploymentsInformer: c.deployments.Informer()}
}

// Informers are the MachineDeployments' and the Machines' informers: a
// change of one of a group's MachineDeployments changes its sizes, of one
// of its Machines its failures (key objects with GroupOf).
func (s *CloudSizes) Informers() []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{s.informer, s.machinesInformer, s.deploymentsInformer}
}

// Standby is how many standby nodes the group holds: its standby holder's
// ready pods (each holds spare capacity on a node of its own).
func (s *CloudSizes) Standby(ng *deckhousev1.NodeGroup) int32 {
	d, err := s.deployments.Deployments(s.namespace).Get(deckhousev1.StandbyHolderPrefix + ng.Name)
	if err != nil || !managed(d.Labels) || d.Labels[deckhousev1.NodeGroupLabel] != ng.Name {
		return 0
	}
	return d.Status.ReadyReplicas
}

// GroupOf is the group of a MachineDeployment, a Machine (its
// MachineDeployment's template labels it) or a standby holder, or "".
func GroupOf(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if o, err := meta.Accessor(obj); err == nil {
		return o.GetLabels()[deckhousev1.NodeGroupLabel]
	}
	return ""
}

// Failures are the group's Machines its MachineHealthCheck found
// unhealthy (HealthCheckSucceeded False), by name, in Deckhouse's shape.
func (s *CloudSizes) Failures(ng *deckhousev1.NodeGroup) []deckhousev1.MachineFailure {
	if !CloudWanted(ng) {
		return nil
	}
	objs, err := s.machines.ByNamespace(s.namespace).List(labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: ng.Name}))
	if err != nil {
		return nil
	}
	var out []deckhousev1.MachineFailure
	for _, obj := range objs {
		m, err := toMachine(obj)
		if err != nil {
			continue
		}
		if f := MachineFailureOf(m); f != nil {
			out = append(out, *f)
		}
	}
	slices.SortFunc(out, func(a, b deckhousev1.MachineFailure) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// MachineFailureOf is m as a failed machine, or nil when its health check
// did not fail.
func MachineFailureOf(m *clusterv1.Machine) *deckhousev1.MachineFailure {
	c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
	if c == nil || c.Status != metav1.ConditionFalse {
		return nil
	}
	var owner string
	for _, o := range m.OwnerReferences {
		if o.Kind == "MachineSet" {
			owner = o.Name
		}
	}
	return &deckhousev1.MachineFailure{Name: m.Name, ProviderID: m.Spec.ProviderID, OwnerRef: owner,
		LastOperation: &deckhousev1.MachineLastOperation{Type: "HealthCheck", State: "Failed",
			Description:    truncate(c.Reason+": "+c.Message, deckhousev1alpha1.MaxInstanceDescription),
			LastUpdateTime: c.LastTransitionTime.UTC().Format(time.RFC3339)}}
}

// Of reports a group's sizes as Deckhouse does: min and max are minPerZone
// and maxPerZone times its zones (the provider's when the group names
// none); desired is the sum of its MachineDeployments' replicas, never
// below min. ok is false for a group that gets no machines here.
func (s *CloudSizes) Of(ng *deckhousev1.NodeGroup) (desired, lo, hi int32, ok bool) {
	if !CloudWanted(ng) {
		return 0, 0, 0, false
	}
	ci := ng.Spec.CloudInstances
	zones := int32(len(Cloud{Zones: s.zones}.ZonesOf(ng)))
	lo, hi = ci.MinPerZone*zones, max(ci.MaxPerZone, ci.MinPerZone)*zones
	mds, err := s.mds.ByNamespace(s.namespace).List(labels.SelectorFromSet(groupLabels(ng.Name)))
	if err != nil {
		return 0, 0, 0, false
	}
	for _, obj := range mds {
		u, isU := obj.(*unstructured.Unstructured)
		if !isU || u.GetDeletionTimestamp() != nil || u.GetAnnotations()[deckhousev1.CloudZoneAnnotation] == "" {
			continue
		}
		if r, found, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); found {
			desired += int32(r)
		}
	}
	return max(desired, lo), lo, hi, true
}
