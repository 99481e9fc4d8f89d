package status

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/clusterapi"
)

// ConditionScaling is True while a group with a known desired size has
// another number of Instances (Deckhouse sets it on groups whose machines
// it makes); absent where the desired size is unknown.
const ConditionScaling = "Scaling"

// Scale is what a group's status says about its size beside its node
// counts: Deckhouse's desired, min, max and instances. A nil field is one
// node-manager cannot know for the group; it is left out of the status
// rather than shown as 0.
type Scale struct {
	Desired, Min, Max, Instances *int32
	// Failures are the failed machines of a group whose machines
	// node-manager orders (status.lastMachineFailures), Standby its held
	// standby nodes (status.standby; nil for any other group).
	Failures []deckhousev1.MachineFailure
	Standby  *int32
}

// CloudSizer reports the sizes of a CloudEphemeral group whose machines
// node-manager orders (clusterapi.CloudSizes); ok is false for any other.
type CloudSizer interface {
	Of(g *deckhousev1.NodeGroup) (desired, min, max int32, ok bool)
	// Failures are the group's failed machines (status.lastMachineFailures).
	Failures(g *deckhousev1.NodeGroup) []deckhousev1.MachineFailure
	// Standby is how many standby nodes the group holds (status.standby).
	Standby(g *deckhousev1.NodeGroup) int32
}

// ComputeScale derives a group's Scale from its spec and the number of
// Instances pinned to it, following Deckhouse's definitions per node type:
//   - CloudEphemeral whose machines node-manager orders (cloud says ok):
//     min and max are minPerZone and maxPerZone times its zones (the
//     provider's when it names none), desired the sum of its
//     MachineDeployments' replicas, never below min.
//   - Any other CloudEphemeral group: min and max as above when it lists
//     its zones (the provider's zone count is unknown otherwise); desired,
//     its machine controller's replicas, is unknown.
//   - Static and CloudStatic with staticInstances: desired is
//     staticInstances.count (it becomes the Cluster API MachineDeployment's
//     replicas); min and max do not apply.
//   - Static and CloudStatic without staticInstances, and CloudPermanent:
//     nodes are joined by hand or by the installer; desired, min and max
//     are unknown.
//
// instances is known for every group: node-manager keeps an Instance for
// every node it admitted (a joining node's before its certificate is
// approved), so it counts machines of every type, where Deckhouse counts
// only the Machines of CloudEphemeral groups. cloud may be nil.
func ComputeScale(g *deckhousev1.NodeGroup, instances int32, cloud CloudSizer) Scale {
	s := Scale{Instances: ptr.To(instances)}
	switch g.Spec.NodeType {
	case deckhousev1.NodeTypeCloudEphemeral:
		if cloud != nil {
			if desired, lo, hi, ok := cloud.Of(g); ok {
				s.Desired, s.Min, s.Max = ptr.To(desired), ptr.To(lo), ptr.To(hi)
				s.Failures, s.Standby = cloud.Failures(g), ptr.To(cloud.Standby(g))
				return s
			}
		}
		if ci := g.Spec.CloudInstances; ci != nil && len(ci.Zones) > 0 {
			zones := int32(len(ci.Zones))
			s.Min = ptr.To(ci.MinPerZone * zones)
			s.Max = ptr.To(ci.MaxPerZone * zones)
		}
	case deckhousev1.NodeTypeStatic, deckhousev1.NodeTypeCloudStatic:
		if si := g.Spec.StaticInstances; si != nil {
			s.Desired = ptr.To(si.Count)
		}
	}
	return s
}

// sameCount reports whether two optional counters say the same.
func sameCount(a, b *int32) bool {
	return ptr.Equal(a, b)
}

// Engine is what makes g's machines (status.engine): Cluster API where
// node-manager wires the group to it (a static group's staticInstances, or
// a CloudEphemeral group with a cloud configured), nothing otherwise.
func Engine(g *deckhousev1.NodeGroup, c Components) deckhousev1.NodeGroupEngine {
	if c.ClusterAPI && clusterapi.Wanted(g) || c.CloudMachines && clusterapi.CloudWanted(g) {
		return deckhousev1.NodeGroupEngineCAPI
	}
	return deckhousev1.NodeGroupEngineNone
}

// scaling is the Scaling condition for a group of known desired size (nil
// where it is unknown): True while its Instances are fewer or more than
// desired. It keeps its lastTransitionTime while its status stays.
func scaling(g *deckhousev1.NodeGroup, s Scale, now metav1.Time) *metav1.Condition {
	if s.Desired == nil || s.Instances == nil {
		return nil
	}
	want, have := *s.Desired, *s.Instances
	c := metav1.Condition{Type: ConditionScaling, Status: metav1.ConditionFalse, Reason: "DesiredReached",
		Message: fmt.Sprintf("%d of %d instances", have, want), ObservedGeneration: g.Generation, LastTransitionTime: now}
	switch {
	case have < want:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "ScalingUp", fmt.Sprintf("%d of %d instances: adding %d", have, want, want-have)
	case have > want:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "ScalingDown", fmt.Sprintf("%d of %d instances: removing %d", have, want, have-want)
	}
	for _, old := range g.Status.Conditions {
		if old.Type == ConditionScaling && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return &c
}
