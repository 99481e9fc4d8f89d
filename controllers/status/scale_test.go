package status

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
		s := ComputeScale(&deckhousev1.NodeGroup{Spec: c.spec}, 4, nil)
		got := [4]string{show(s.Desired), show(s.Min), show(s.Max), show(s.Instances)}
		if got != c.want {
			t.Errorf("%s: desired/min/max/instances %v, want %v", c.name, got, c.want)
		}
	}
}

// sizer plays clusterapi.CloudSizes: it knows the sizes of the groups it
// holds.
type sizer map[string][3]int32

func (s sizer) Of(g *deckhousev1.NodeGroup) (int32, int32, int32, bool) {
	v, ok := s[g.Name]
	return v[0], v[1], v[2], ok
}

func (s sizer) Failures(g *deckhousev1.NodeGroup) []deckhousev1.MachineFailure {
	if _, ok := s[g.Name]; !ok {
		return nil
	}
	return []deckhousev1.MachineFailure{{Name: g.Name + "-m"}}
}

func (s sizer) Standby(g *deckhousev1.NodeGroup) int32 { return s[g.Name][0] - 4 }

// TestACloudGroupWhoseMachinesNodeManagerOrdersShowsItsSizes: desired, min
// and max come from the MachineDeployments (through the sizer) where
// node-manager orders the machines, and the Scaling condition follows.
func TestACloudGroupWhoseMachinesNodeManagerOrdersShowsItsSizes(t *testing.T) {
	cloudSizes := sizer{"ordered": {5, 2, 8}}
	ordered := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "ordered"}, Spec: deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeCloudEphemeral, CloudInstances: &deckhousev1.CloudInstancesSpec{MinPerZone: 1, MaxPerZone: 4}}}
	s := ComputeScale(ordered, 3, cloudSizes)
	if got := [4]string{show(s.Desired), show(s.Min), show(s.Max), show(s.Instances)}; got != [4]string{"5", "2", "8", "3"} {
		t.Errorf("desired/min/max/instances %v, want 5 2 8 3", got)
	}
	if ptr.Deref(s.Standby, -1) != 1 {
		t.Errorf("standby %v, want the sizer's 1", s.Standby)
	}
	if len(s.Failures) != 1 || s.Failures[0].Name != "ordered-m" {
		t.Errorf("failures %+v, want the sizer's", s.Failures)
	}
	if sc := scaling(ordered, s, metav1.Now()); sc == nil || sc.Status != metav1.ConditionTrue || sc.Reason != "ScalingUp" {
		t.Errorf("Scaling %+v, want True ScalingUp (3 of 5)", sc)
	}
	other := ordered.DeepCopy()
	other.Name = "elsewhere"
	if s := ComputeScale(other, 3, cloudSizes); s.Desired != nil || s.Min != nil {
		t.Errorf("a group the sizer does not know: desired %s min %s, want both unknown", show(s.Desired), show(s.Min))
	}
}

func TestAGroupWithoutInstancesShowsZeroInstances(t *testing.T) {
	s := ComputeScale(&deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}, 0, nil)
	if s.Instances == nil || *s.Instances != 0 {
		t.Errorf("instances %s, want 0: node-manager always knows its own Instances", show(s.Instances))
	}
}

// TestEngineIsCAPIOnlyWhereClusterAPIMakesTheMachines: status.engine is
// CAPI for a Static or CloudStatic group with staticInstances while
// node-manager runs Cluster API, and for a CloudEphemeral group with a cloud
// configured; None everywhere else.
func TestEngineIsCAPIOnlyWhereClusterAPIMakesTheMachines(t *testing.T) {
	static := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 1}}}
	byHand := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	cloud := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudPermanent}}
	for _, c := range []struct {
		name string
		g    *deckhousev1.NodeGroup
		capi bool
		want deckhousev1.NodeGroupEngine
	}{
		{"staticInstances with Cluster API", static, true, deckhousev1.NodeGroupEngineCAPI},
		{"staticInstances without Cluster API", static, false, deckhousev1.NodeGroupEngineNone},
		{"joined by hand", byHand, true, deckhousev1.NodeGroupEngineNone},
		{"CloudPermanent", cloud, true, deckhousev1.NodeGroupEngineNone},
	} {
		if got := Engine(c.g, Components{ClusterAPI: c.capi}); got != c.want {
			t.Errorf("%s: engine %q, want %q", c.name, got, c.want)
		}
	}
	ephemeral := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudEphemeral,
		CloudInstances: &deckhousev1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "AWSMachineTemplate", Name: "small"}, MaxPerZone: 1}}}
	if got := Engine(ephemeral, Components{ClusterAPI: true}); got != deckhousev1.NodeGroupEngineNone {
		t.Errorf("CloudEphemeral without a cloud: engine %q, want None", got)
	}
	if got := Engine(ephemeral, Components{ClusterAPI: true, CloudMachines: true}); got != deckhousev1.NodeGroupEngineCAPI {
		t.Errorf("CloudEphemeral with a cloud (--cloud-cluster): engine %q, want CAPI", got)
	}
}

// TestScalingConditionFollowsInstancesAgainstDesired: Scaling is True
// (ScalingUp, ScalingDown) while the Instances differ from a known desired
// size, False once they match, keeps its transition time while its status
// stays, and is absent where the desired size is unknown.
func TestScalingConditionFollowsInstancesAgainstDesired(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	g := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 3}}}
	for _, c := range []struct {
		instances      int32
		status, reason string
	}{{1, "True", "ScalingUp"}, {5, "True", "ScalingDown"}, {3, "False", "DesiredReached"}} {
		sc := scaling(g, ComputeScale(g, c.instances, nil), t0)
		if sc == nil || string(sc.Status) != c.status || sc.Reason != c.reason {
			t.Errorf("%d of 3 instances: %+v, want %s %s", c.instances, sc, c.status, c.reason)
		}
	}
	g.Status.Conditions = []metav1.Condition{*scaling(g, ComputeScale(g, 1, nil), t0)}
	if sc := scaling(g, ComputeScale(g, 2, nil), t1); !sc.LastTransitionTime.Equal(&t0) {
		t.Errorf("still scaling up: transition time %v, want the first one %v", sc.LastTransitionTime, t0)
	}
	if sc := scaling(g, ComputeScale(g, 3, nil), t1); !sc.LastTransitionTime.Equal(&t1) {
		t.Errorf("scaled: transition time %v, want now %v", sc.LastTransitionTime, t1)
	}
	byHand := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	if sc := scaling(byHand, ComputeScale(byHand, 2, nil), t0); sc != nil {
		t.Errorf("a group joined by hand has no desired size, but Scaling %+v", sc)
	}
}
