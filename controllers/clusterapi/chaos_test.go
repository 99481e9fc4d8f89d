package clusterapi

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// readyNode is a Node whose Ready condition says ready.
func readyNode(name string, ready bool) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
}

func TestChaosPeriod(t *testing.T) {
	ng := cloudGroup("g", 1, 1)
	for period, want := range map[string]time.Duration{"": 6 * time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "1m": time.Minute} {
		ng.Spec.Chaos = &deckhousev1.ChaosSpec{Mode: deckhousev1.ChaosModeDrainAndDelete, Period: period}
		if got, err := ChaosPeriod(ng); err != nil || got != want {
			t.Errorf("period %q: %v %v, want %v", period, got, err, want)
		}
	}
	ng.Spec.Chaos.Period = "0m"
	if _, err := ChaosPeriod(ng); err == nil {
		t.Error("a period of 0m is accepted")
	}
}

// TestChaosTakesAVictimOnlyFromAWholeReadyGroupAboveItsMinimum: every
// machine Running with a Ready node, none being deleted, every node a
// machine's, at least two, and one fewer still at the minimum; then pick
// chooses among them.
func TestChaosTakesAVictimOnlyFromAWholeReadyGroupAboveItsMinimum(t *testing.T) {
	healthy := func() ([]*clusterv1.Machine, []*corev1.Node) {
		return []*clusterv1.Machine{machine("m-a", "a", "Running"), machine("m-b", "b", "Running"), machine("m-c", "c", "Running")},
			[]*corev1.Node{readyNode("a", true), readyNode("b", true), readyNode("c", true)}
	}
	second := func(n int) int { return 1 }

	ms, ns := healthy()
	if v, why := ChaosVictim(ms, ns, 2, second); v == nil || v.Name != "m-b" {
		t.Errorf("a whole ready group of 3 above its minimum of 2: victim %v (%s), want m-b", v, why)
	}
	for what, c := range map[string]struct {
		change func([]*clusterv1.Machine, []*corev1.Node) ([]*clusterv1.Machine, []*corev1.Node)
		min    int32
		why    string
	}{
		"a node not Ready": {func(ms []*clusterv1.Machine, ns []*corev1.Node) ([]*clusterv1.Machine, []*corev1.Node) {
			ns[2] = readyNode("c", false)
			return ms, ns
		}, 0, "not Ready"},
		"a machine being deleted": {func(ms []*clusterv1.Machine, ns []*corev1.Node) ([]*clusterv1.Machine, []*corev1.Node) {
			now := metav1.Now()
			ms[0].DeletionTimestamp = &now
			return ms, ns
		}, 0, "being deleted"},
		"a machine provisioning": {func(ms []*clusterv1.Machine, ns []*corev1.Node) ([]*clusterv1.Machine, []*corev1.Node) {
			return append(ms, machine("m-d", "", "Provisioning")), ns
		}, 0, "Provisioning"},
		"a node no machine backs": {func(ms []*clusterv1.Machine, ns []*corev1.Node) ([]*clusterv1.Machine, []*corev1.Node) {
			return ms, append(ns, readyNode("stray", true))
		}, 0, "a node is not a machine's"},
		"one fewer would be below the minimum": {func(ms []*clusterv1.Machine, ns []*corev1.Node) ([]*clusterv1.Machine, []*corev1.Node) {
			return ms, ns
		}, 3, "below the group's minimum of 3"},
		"a single machine": {func(ms []*clusterv1.Machine, ns []*corev1.Node) ([]*clusterv1.Machine, []*corev1.Node) {
			return ms[:1], ns[:1]
		}, 0, "at least 2"},
	} {
		ms, ns := c.change(healthy())
		if v, why := ChaosVictim(ms, ns, c.min, second); v != nil || !strings.Contains(why, c.why) {
			t.Errorf("%s: victim %v, held %q; want none, held for %q", what, v, why, c.why)
		}
	}
}

// TestARollCoversTheMachinesMadeBeforeIt: a MachineDeployment rolls again
// only for a waiting machine made at or after its last roll.
func TestARollCoversTheMachinesMadeBeforeIt(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC))
	made := func(at metav1.Time) *clusterv1.Machine {
		m := machine("m", "n", "Running")
		m.CreationTimestamp = at
		return m
	}
	before, after := metav1.NewTime(t0.Add(-time.Minute)), metav1.NewTime(t0.Add(time.Minute))
	for _, c := range []struct {
		after   metav1.Time
		waiting []*clusterv1.Machine
		want    bool
	}{
		{metav1.Time{}, nil, false},
		{metav1.Time{}, []*clusterv1.Machine{made(before)}, true},
		{t0, []*clusterv1.Machine{made(before)}, false},
		{t0, []*clusterv1.Machine{made(before), made(after)}, true},
		{t0, []*clusterv1.Machine{made(t0)}, true},
	} {
		if got := RolloutNeeded(c.after, c.waiting); got != c.want {
			t.Errorf("rolled after %v, %d waiting: %v, want %v", c.after, len(c.waiting), got, c.want)
		}
	}
}
