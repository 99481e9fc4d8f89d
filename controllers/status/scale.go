package status

import (
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Scale is what a group's status says about its size beside its node
// counts: Deckhouse's desired, min, max and instances. A nil field is one
// node-manager cannot know for the group; it is left out of the status
// rather than shown as 0.
type Scale struct {
	Desired, Min, Max, Instances *int32
}

// ComputeScale derives a group's Scale from its spec and the number of
// Instances pinned to it, following Deckhouse's definitions per node type:
//   - CloudEphemeral: min and max are minPerZone and maxPerZone times the
//     number of zones the group lists. With no zones listed, Deckhouse
//     multiplies by the cloud provider's zone count, which node-manager
//     does not read, so both stay unknown. desired is the sum of the
//     machine controller's MachineDeployment replicas, which node-manager
//     does not see: unknown.
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
// only the Machines of CloudEphemeral groups.
func ComputeScale(g *deckhousev1.NodeGroup, instances int32) Scale {
	s := Scale{Instances: ptr.To(instances)}
	switch g.Spec.NodeType {
	case deckhousev1.NodeTypeCloudEphemeral:
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
