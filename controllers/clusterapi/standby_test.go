package clusterapi

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func TestStandbyCountIsANumberOrAShareOfTheMaximum(t *testing.T) {
	for _, c := range []struct {
		standby *intstr.IntOrString
		zones   int
		want    int32
	}{
		{nil, 2, 0},
		{new(intstr.FromInt32(2)), 2, 2},
		{new(intstr.FromString("10%")), 2, 0}, // 10% of 4×2 = 0.8, rounded down
		{new(intstr.FromString("20%")), 2, 1}, // 1.6
		{new(intstr.FromString("50%")), 3, 6}, // of 4×3
		{new(intstr.FromString("0%")), 3, 0},
	} {
		ng := cloudGroup("g", 1, 4)
		ng.Spec.CloudInstances.Standby = c.standby
		if got, err := StandbyCount(ng, c.zones); err != nil || got != c.want {
			t.Errorf("standby %v over %d zones: %d %v, want %d", c.standby, c.zones, got, err, c.want)
		}
	}
	fixed := cloudGroup("g", 3, 3)
	fixed.Spec.CloudInstances.Standby = new(intstr.FromInt32(2))
	if got, _ := StandbyCount(fixed, 2); got != 0 {
		t.Errorf("a group of fixed size keeps %d standby nodes, want none (no autoscaler adds them)", got)
	}
}

// TestStandbyHoldersAreSizedFromTheClassOrTheNodes: the class's capacity
// annotations first, else the smallest Ready node's allocatable, else
// unknown; the holder requests the rate's share of it.
func TestStandbyHoldersAreSizedFromTheClassOrTheNodes(t *testing.T) {
	node := func(name, cpu, mem string, ready bool) *corev1.Node {
		n := readyNode(name, ready)
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return n
	}
	show := func(l corev1.ResourceList) string {
		c, m := l[corev1.ResourceCPU], l[corev1.ResourceMemory]
		return c.String() + " " + m.String()
	}
	annotated := class(map[string]any{})
	annotated.SetAnnotations(map[string]string{deckhousev1.AutoscalerCapacityPrefix + "cpu": "4", deckhousev1.AutoscalerCapacityPrefix + "memory": "8Gi"})
	nodes := []*corev1.Node{node("big", "8", "32Gi", true), node("small", "2", "4Gi", true), node("tiny-but-down", "1", "1Gi", false)}
	// Not comparable: the smallest CPU and the smallest memory, whatever the order.
	odd := []*corev1.Node{node("cpu", "2", "16Gi", true), node("mem", "8", "4Gi", true)}
	for _, order := range [][]*corev1.Node{odd, {odd[1], odd[0]}} {
		if got, ok := NodeCapacity(class(map[string]any{}), order); !ok || show(got) != "2 4Gi" {
			t.Errorf("nodes %s, %s: %s %v, want 2 4Gi", order[0].Name, order[1].Name, show(got), ok)
		}
	}
	if got, ok := NodeCapacity(annotated, nodes); !ok || show(got) != "4 8Gi" {
		t.Errorf("the class's annotations: %s %v, want 4 8Gi", show(got), ok)
	}
	if got, ok := NodeCapacity(class(map[string]any{}), nodes); !ok || show(got) != "2 4Gi" {
		t.Errorf("no annotations: %s %v, want the smallest Ready node's 2 4Gi", show(got), ok)
	}
	if _, ok := NodeCapacity(class(map[string]any{}), nodes[2:]); ok {
		t.Error("no annotations and no Ready node: a capacity is made up")
	}
	if got := StandbyRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}, 50); show(got) != "2 4Gi" {
		t.Errorf("50%% of 4 CPUs and 8Gi: %s", show(got))
	}
	if got := StandbyRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}, 33); show(got) != "990m 354334801" {
		t.Errorf("33%% of 3 CPUs and 1Gi: %s", show(got))
	}
}

// TestStandbyHolderIsWhatThePolicyAdmits: one container of the pinned
// pause image, no token, no volume, non-root, unprivileged, at the standby
// priority, on the group's nodes, one per node, tolerating the group's
// taints.
func TestStandbyHolderIsWhatThePolicyAdmits(t *testing.T) {
	ng := cloudGroup("g", 0, 4)
	ng.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Taints: []deckhousev1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}}
	d := StandbyHolder(ng, ns, 2, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	p := d.Spec.Template.Spec
	if d.Name != deckhousev1.StandbyHolderPrefix+"g" || *d.Spec.Replicas != 2 || len(p.Containers) != 1 ||
		p.Containers[0].Name != deckhousev1.StandbyHolderContainer || p.Containers[0].Image != deckhousev1.StandbyHolderImage ||
		*p.AutomountServiceAccountToken || len(p.Volumes) != 0 || !*p.SecurityContext.RunAsNonRoot ||
		*p.Containers[0].SecurityContext.AllowPrivilegeEscalation || p.PriorityClassName != deckhousev1.StandbyPriorityClass {
		t.Fatalf("standby holder: %+v", d)
	}
	if p.NodeSelector[deckhousev1.NodeGroupLabel] != "g" || len(p.Tolerations) != 1 || p.Tolerations[0].Key != "dedicated" ||
		p.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != corev1.LabelHostname {
		t.Errorf("placement: selector %v, tolerations %v, affinity %+v", p.NodeSelector, p.Tolerations, p.Affinity)
	}
	if !standbyHolderCurrent(d, d) {
		t.Error("a holder is not current against itself")
	}
	fewer := StandbyHolder(ng, ns, 1, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	if standbyHolderCurrent(d, fewer) {
		t.Error("a change of the standby count is not seen")
	}
}
