package clusterapi

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// CloudSizes is what NodeGroup status reports of a CloudEphemeral group's
// size, read from the group's MachineDeployments: it is given to the status
// controller, which shares this controller's informer.
type CloudSizes struct {
	zones     []string
	namespace string
	mds       cache.GenericLister
	informer  cache.SharedIndexInformer
}

// CloudSizes is nil unless CloudEphemeral groups get machines here
// (--cluster-api and --cloud-cluster).
func (c *Controller) CloudSizes() *CloudSizes {
	if !c.enabled || c.classes == nil {
		return nil
	}
	return &CloudSizes{zones: c.opts.CloudZones, namespace: c.d.Namespace, mds: c.mds,
		informer: c.capi.ForResource(machineDeploymentsResource).Informer()}
}

// Informer is the MachineDeployments' informer: a change of one of a
// group's MachineDeployments changes its sizes (key objects with GroupOf).
func (s *CloudSizes) Informer() cache.SharedIndexInformer { return s.informer }

// GroupOf is the group an object node-manager made belongs to, or "".
func GroupOf(obj any) string { return managedGroup(obj) }

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
