package status

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func node(name, group string, ready bool, ann ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: group}, Annotations: map[string]string{}}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	n.Status.NodeInfo.KubeletVersion = "v1.36.3"
	for i := 0; i+1 < len(ann); i += 2 {
		n.Annotations[ann[i]] = ann[i+1]
	}
	return n
}

var t0 = metav1.NewTime(time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC))

func TestComputeCountsAndConditions(t *testing.T) {
	g := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic,
		Disruptions: &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalManual}}}
	ns := []*corev1.Node{
		node("a", "w", true, deckhousev1.ConfigurationChecksumAnnotation, "new"),
		node("b", "w", true, deckhousev1.ConfigurationChecksumAnnotation, "old", deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, ""),
		node("c", "w", false, deckhousev1.ConfigurationChecksumAnnotation, "new"),
	}
	s := Compute(g, "new", ns, Components{}, t0)
	if s.Nodes != 3 || s.Ready != 2 || s.UpToDate != 2 || s.KubernetesVersion != "1.36" {
		t.Errorf("counts %+v", s)
	}
	for typ, want := range map[string]metav1.ConditionStatus{
		ConditionReady: metav1.ConditionFalse, ConditionUpdating: metav1.ConditionTrue,
		ConditionWaitingForDisruptiveApproval: metav1.ConditionTrue, ConditionError: metav1.ConditionFalse,
	} {
		if c := meta.FindStatusCondition(s.Conditions, typ); c == nil || c.Status != want {
			t.Errorf("condition %s = %+v, want %s", typ, c, want)
		}
	}
	if c := meta.FindStatusCondition(s.Conditions, ConditionWaitingForDisruptiveApproval); !strings.Contains(c.Message, "Manual") {
		t.Errorf("a Manual group's waiting message should say how to approve: %q", c.Message)
	}
	if s.SummaryReady != "False" || s.SummaryMessage != "2 of 3 nodes are Ready" {
		t.Errorf("summary %q %q", s.SummaryReady, s.SummaryMessage)
	}
}

func TestTransitionTimesStayWhileStatusStays(t *testing.T) {
	g := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	first := Compute(g, "s", []*corev1.Node{node("a", "w", true)}, Components{}, t0)
	g.Status.Conditions = first.Conditions
	later := metav1.NewTime(t0.Add(time.Hour))
	second := Compute(g, "s", []*corev1.Node{node("a", "w", true), node("b", "w", true)}, Components{}, later)
	for _, c := range second.Conditions {
		if !c.LastTransitionTime.Equal(&t0) {
			t.Errorf("condition %s moved its transition time to %v though its status stayed", c.Type, c.LastTransitionTime)
		}
	}
	g.Status.Conditions = second.Conditions
	third := Compute(g, "s", []*corev1.Node{node("a", "w", false)}, Components{}, later)
	if c := meta.FindStatusCondition(third.Conditions, ConditionReady); !c.LastTransitionTime.Equal(&later) {
		t.Errorf("Ready changed but kept transition time %v", c.LastTransitionTime)
	}
}

func TestErrorsFromRenderingAndDrains(t *testing.T) {
	g := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	g.Status.Conditions = []metav1.Condition{{Type: ConditionRendered, Status: metav1.ConditionFalse, Message: "step 100_x: line 3: missing key"}}
	s := Compute(g, "s", []*corev1.Node{node("a", "w", true, deckhousev1.DrainFailedAnnotation, "pdb")}, Components{}, t0)
	c := meta.FindStatusCondition(s.Conditions, ConditionError)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "missing key") || !strings.Contains(c.Message, "drain failed on a") {
		t.Errorf("Error condition %+v", c)
	}
	if s.SummaryMessage != c.Message || s.Error != c.Message {
		t.Errorf("summary %q and status.error %q should show the error %q", s.SummaryMessage, s.Error, c.Message)
	}
	if ok := Compute(g, "s", []*corev1.Node{node("a", "w", true)}, Components{}, t0); ok.Error == "" {
		t.Errorf("still not rendering, but status.error is empty")
	}
	g.Status.Conditions = nil
	if ok := Compute(g, "s", []*corev1.Node{node("a", "w", true)}, Components{}, t0); ok.Error != "" {
		t.Errorf("no error, but status.error %q", ok.Error)
	}
}

func TestCloudEphemeralNeedsItsMinimum(t *testing.T) {
	g := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudEphemeral,
		CloudInstances: &deckhousev1.CloudInstancesSpec{MinPerZone: 1, Zones: []string{"a", "b"}}}}
	if s := Compute(g, "s", []*corev1.Node{node("a", "w", true)}, Components{}, t0); s.SummaryReady != "False" {
		t.Errorf("one Ready node of a minimum of two: %+v", s)
	}
	if s := Compute(g, "s", []*corev1.Node{node("a", "w", true), node("b", "w", true)}, Components{}, t0); s.SummaryReady != "True" {
		t.Errorf("minimum met: %+v", s)
	}
}
