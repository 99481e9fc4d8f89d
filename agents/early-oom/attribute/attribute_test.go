package attribute

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-manager/node-manager/agents/early-oom/cgroup"
	"github.com/node-manager/node-manager/agents/early-oom/psi"
	"github.com/node-manager/node-manager/agents/early-oom/rank"
)

func pr(some, full float64) *psi.Pressure {
	return &psi.Pressure{Some: psi.Averages{Avg10: some}, Full: psi.Averages{Avg10: full}}
}

// TestPressureTakesOutPodsAtTheirOwnLimit: the figures the thresholds see.
func TestPressureTakesOutPodsAtTheirOwnLimit(t *testing.T) {
	node := *pr(70, 60)
	for name, tc := range map[string]struct {
		tree       cgroup.Tree
		some, full float64
		source     Source
	}{
		"a thrasher at its own limit on an idle node: nothing": {
			tree: cgroup.Tree{Parent: pr(70, 60), Pods: map[types.UID]cgroup.Pod{
				"thrasher": {Pressure: pr(70, 65), AtLimit: true},
				"idle":     {Pressure: pr(0, 0)},
			}},
			some: 0, full: 0, source: Pods,
		},
		"a hog without a limit: the parent's": {
			tree: cgroup.Tree{Parent: pr(70, 60), Pods: map[types.UID]cgroup.Pod{
				"hog":   {Pressure: pr(75, 70)},
				"other": {Pressure: pr(40, 30)},
			}},
			some: 70, full: 60, source: Pods,
		},
		"a hog and a thrasher: the hog's, up to the parent's": {
			tree: cgroup.Tree{Parent: pr(70, 60), Pods: map[types.UID]cgroup.Pod{
				"thrasher": {Pressure: pr(90, 90), AtLimit: true},
				"hog":      {Pressure: pr(50, 45)},
			}},
			some: 50, full: 45, source: Pods,
		},
		"a pod whose pressure cannot be read: the parent's": {
			tree: cgroup.Tree{Parent: pr(70, 60), Pods: map[types.UID]cgroup.Pod{
				"thrasher": {Pressure: pr(70, 65), AtLimit: true},
				"unknown":  {},
			}},
			some: 70, full: 60, source: Pods,
		},
		"no pressure files (cgroup v1): the node's": {
			tree: cgroup.Tree{Pods: map[types.UID]cgroup.Pod{"thrasher": {AtLimit: true}}},
			some: 70, full: 60, source: Node,
		},
	} {
		got, source := Pressure(node, tc.tree)
		if got.Some.Avg10 != tc.some || got.Full.Avg10 != tc.full || source != tc.source {
			t.Errorf("%s: some %v full %v from %s; want %v %v from %s", name, got.Some.Avg10, got.Full.Avg10, source, tc.some, tc.full, tc.source)
		}
	}
}

// TestPreferKeepsThePodsUnderPressureInRankOrder.
func TestPreferKeepsThePodsUnderPressureInRankOrder(t *testing.T) {
	cand := func(uid string) rank.Candidate {
		return rank.Candidate{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)}}}
	}
	ranked := []rank.Candidate{cand("idle-big"), cand("hog"), cand("stalled")}
	tree := cgroup.Tree{Parent: pr(50, 40), Pods: map[types.UID]cgroup.Pod{
		"idle-big": {Pressure: pr(0, 0)}, "hog": {Pressure: pr(60, 50)}, "stalled": {Pressure: pr(5, 1)},
	}}
	got := Prefer(ranked, UnderPressure(tree))
	if len(got) != 2 || got[0].Pod.Name != "hog" || got[1].Pod.Name != "stalled" {
		t.Errorf("preferred %v; want hog, stalled", names(got))
	}
	if got := Prefer(ranked, UnderPressure(cgroup.Tree{Pods: tree.Pods})); len(got) != 3 {
		t.Errorf("without pressure files %v; want every candidate", names(got))
	}
	none := cgroup.Tree{Parent: pr(0, 0), Pods: map[types.UID]cgroup.Pod{"idle-big": {Pressure: pr(0, 0)}}}
	if got := Prefer(ranked, UnderPressure(none)); len(got) != 3 {
		t.Errorf("with no pod under pressure %v; want every candidate", names(got))
	}
}

func names(cs []rank.Candidate) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Pod.Name)
	}
	return n
}
