package status

import (
	"fmt"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// show prints an optional counter: "-" when unknown.
func show(v *int32) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func TestScaleFollowsDeckhousePerNodeTypeAndLeavesTheUnknownOut(t *testing.T) {
	cloud := func(zones ...string) *deckhousev1.CloudInstancesSpec {
		return &deckhousev1.CloudInstancesSpec{MinPerZone: 2, MaxPerZone: 5, Zones: zones}
	}
	cases := []struct {
		name string
		spec deckhousev1.NodeGroupSpec
		// desired, min, max, instances ("-" for absent)
		want [4]string
	}{
		{"CloudEphemeral: min and max per zone times the zones it lists; desired is the machine controller's",
			deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudEphemeral, CloudInstances: cloud("a", "b", "c")},
			[4]string{"-", "6", "15", "4"}},
		{"CloudEphemeral with a minimum of zero shows min 0, not nothing",
			deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudEphemeral,
				CloudInstances: &deckhousev1.CloudInstancesSpec{MinPerZone: 0, MaxPerZone: 3, Zones: []string{"a"}}},
			[4]string{"-", "0", "3", "4"}},
		{"CloudEphemeral whose zones are the provider's: the zone count is unknown",
			deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudEphemeral, CloudInstances: cloud()},
			[4]string{"-", "-", "-", "4"}},
		{"Static with staticInstances: desired is their count",
			deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 3}},
			[4]string{"3", "-", "-", "4"}},
		{"CloudStatic with staticInstances count 0: desired 0",
			deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudStatic, StaticInstances: &deckhousev1.StaticInstancesSpec{}},
			[4]string{"0", "-", "-", "4"}},
		{"Static joined by hand: only instances",
			deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic},
			[4]string{"-", "-", "-", "4"}},
		{"CloudPermanent: the installer's replicas are unknown",
			deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudPermanent},
			[4]string{"-", "-", "-", "4"}},
	}
	for _, c := range cases {
		s := ComputeScale(&deckhousev1.NodeGroup{Spec: c.spec}, 4)
		got := [4]string{show(s.Desired), show(s.Min), show(s.Max), show(s.Instances)}
		if got != c.want {
			t.Errorf("%s: desired/min/max/instances %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAGroupWithoutInstancesShowsZeroInstances(t *testing.T) {
	s := ComputeScale(&deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}, 0)
	if s.Instances == nil || *s.Instances != 0 {
		t.Errorf("instances %s, want 0: node-manager always knows its own Instances", show(s.Instances))
	}
}
