package instances

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

func TestSummary(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Message: typ + " " + string(st)}
	}
	cases := []struct {
		conds []metav1.Condition
		want  deckhousev1alpha1.BashibleStatus
	}{
		{nil, "Unknown"},
		{[]metav1.Condition{cond("BashibleReady", metav1.ConditionTrue)}, "Ready"},
		{[]metav1.Condition{cond("BashibleReady", metav1.ConditionFalse)}, "Error"},
		{[]metav1.Condition{cond("BashibleReady", metav1.ConditionUnknown), cond("WaitingApproval", metav1.ConditionTrue)}, "WaitingApproval"},
		{[]metav1.Condition{cond("WaitingApproval", metav1.ConditionFalse), cond("WaitingDisruptionApproval", metav1.ConditionTrue)}, "WaitingDisruptionApproval"},
	}
	for _, c := range cases {
		inst := &deckhousev1alpha1.Instance{Status: deckhousev1alpha1.InstanceStatus{Conditions: c.conds}}
		phase, got, msg := Summary(&corev1.Node{}, inst)
		if got != c.want || phase != deckhousev1alpha1.InstanceRunning || msg == "" {
			t.Errorf("conditions %v: %s %s %q, want %s", c.conds, phase, got, msg, c.want)
		}
	}
	now := metav1.Now()
	if phase, _, _ := Summary(&corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, &deckhousev1alpha1.Instance{}); phase != deckhousev1alpha1.InstanceTerminating {
		t.Errorf("a deleting node's phase is %s", phase)
	}
}

func TestOnlyNodesOlderThanTheFirstRunAreAdoptedFromTheirLabel(t *testing.T) {
	firstRun := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	node := func(created time.Time) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	}
	cases := []struct {
		name     string
		node     *corev1.Node
		firstRun time.Time
		want     bool
	}{
		{"a node that joined before node-manager ran", node(firstRun.Add(-time.Hour)), firstRun, true},
		{"a node registered after node-manager ran (it did not join through its approval)", node(firstRun.Add(time.Second)), firstRun, false},
		{"a node registered in the very second node-manager first ran", node(firstRun), firstRun, false},
		{"any node while the first run is unknown", node(firstRun.Add(-time.Hour)), time.Time{}, false},
	}
	for _, c := range cases {
		if got := Adoptable(c.node, c.firstRun); got != c.want {
			t.Errorf("%s: adoptable %v, want %v", c.name, got, c.want)
		}
	}
}
