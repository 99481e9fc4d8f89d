package approval

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// noon on a Wednesday.
var noon = time.Date(2026, 11, 18, 12, 0, 0, 0, time.UTC)

func group(name string, mutate ...func(*deckhousev1.NodeGroup)) *deckhousev1.NodeGroup {
	g := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	for _, m := range mutate {
		m(g)
	}
	return g
}

func maxc(v intstr.IntOrString) func(*deckhousev1.NodeGroup) {
	return func(g *deckhousev1.NodeGroup) { g.Spec.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &v} }
}

func mode(m deckhousev1.ApprovalMode, drain *bool, w ...deckhousev1.DisruptionWindow) func(*deckhousev1.NodeGroup) {
	return func(g *deckhousev1.NodeGroup) {
		g.Spec.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: m}
		switch m {
		case deckhousev1.ApprovalAutomatic:
			g.Spec.Disruptions.Automatic = &deckhousev1.AutomaticDisruptions{DrainBeforeApproval: drain, Windows: w}
		case deckhousev1.ApprovalRollingUpdate:
			g.Spec.Disruptions.RollingUpdate = &deckhousev1.RollingUpdateDisruptions{Windows: w}
		}
	}
}

func node(name string, ready bool, ann ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	for i := 0; i+1 < len(ann); i += 2 {
		n.Annotations[ann[i]] = ann[i+1]
	}
	return n
}

func after(in Input) map[string]*corev1.Node {
	d := Plan(in)
	out := map[string]*corev1.Node{}
	for _, n := range in.Nodes {
		c := n.DeepCopy()
		if ch := d.Changes[n.Name]; ch != nil {
			ch.ApplyTo(c)
		}
		out[n.Name] = c
	}
	return out
}

func approvedNames(m map[string]*corev1.Node) []string {
	var out []string
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		if n, ok := m[name]; ok && nodes.Has(n, deckhousev1.ApprovedAnnotation) {
			out = append(out, name)
		}
	}
	return out
}

func TestMaxConcurrent(t *testing.T) {
	for _, c := range []struct {
		v    string
		n    int
		want int
	}{{"1", 5, 1}, {"2", 5, 2}, {"40%", 5, 2}, {"10%", 5, 1}, {"100%", 3, 3}, {"50%", 1, 1}, {"3", 0, 3}} {
		if got := MaxConcurrent(c.v, c.n); got != c.want {
			t.Errorf("MaxConcurrent(%q, %d) = %d, want %d", c.v, c.n, got, c.want)
		}
	}
}

func TestApprovesUpToMaxConcurrentWhileHealthy(t *testing.T) {
	for _, c := range []struct {
		max  intstr.IntOrString
		want []string
	}{
		{intstr.FromInt32(1), []string{"a"}},
		{intstr.FromInt32(2), []string{"a", "b"}},
		{intstr.FromString("40%"), []string{"a", "b"}},
		{intstr.FromString("100%"), []string{"a", "b", "c", "d", "e"}},
	} {
		var ns []*corev1.Node
		for _, name := range []string{"e", "d", "c", "b", "a"} {
			ns = append(ns, node(name, true, deckhousev1.WaitingForApprovalAnnotation, ""))
		}
		got := approvedNames(after(Input{Group: group("w", maxc(c.max)), Checksum: sum, Nodes: ns, Now: noon}))
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("maxConcurrent %s: approved %v, want %v", c.max.String(), got, c.want)
		}
	}
}

func TestApprovalCountsNodesAlreadyApproved(t *testing.T) {
	ns := []*corev1.Node{
		node("a", true, deckhousev1.ApprovedAnnotation, ""),
		node("b", true, deckhousev1.WaitingForApprovalAnnotation, ""),
	}
	if got := approvedNames(after(Input{Group: group("w"), Checksum: sum, Nodes: ns, Now: noon})); fmt.Sprint(got) != "[a]" {
		t.Errorf("approved %v, want only a (one slot, taken)", got)
	}
}

func TestUnhealthyGroupApprovesOnlyNotReadyWaitingNodes(t *testing.T) {
	ns := []*corev1.Node{
		node("a", true, deckhousev1.WaitingForApprovalAnnotation, ""),
		node("b", false),
		node("c", true, deckhousev1.WaitingForApprovalAnnotation, ""),
	}
	if got := approvedNames(after(Input{Group: group("w", maxc(intstr.FromInt32(3))), Checksum: sum, Nodes: ns, Now: noon})); got != nil {
		t.Errorf("a group with a NotReady node approved %v; want it to wait", got)
	}
	ns[1] = node("b", false, deckhousev1.WaitingForApprovalAnnotation, "")
	if got := approvedNames(after(Input{Group: group("w", maxc(intstr.FromInt32(1))), Checksum: sum, Nodes: ns, Now: noon})); fmt.Sprint(got) != "[b]" {
		t.Errorf("approved %v; want the NotReady waiting node b first", got)
	}
}

func TestFinishedNodeIsCleanedAndUncordonedOnlyIfWeDrainedIt(t *testing.T) {
	n := node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.ConfigurationChecksumAnnotation, sum, deckhousev1.DisruptionApprovedAnnotation, "", deckhousev1.DrainedAnnotation, "bashible")
	n.Spec.Unschedulable = true
	user := node("b", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.ConfigurationChecksumAnnotation, sum, deckhousev1.DrainedAnnotation, "user")
	user.Spec.Unschedulable = true
	out := after(Input{Group: group("w"), Checksum: sum, Nodes: []*corev1.Node{n, user}, Now: noon})
	if a := out["a"]; len(a.Annotations) != 1 || a.Spec.Unschedulable {
		t.Errorf("node a after finishing: annotations %v unschedulable %v; want only the checksum, uncordoned", a.Annotations, a.Spec.Unschedulable)
	}
	if b := out["b"]; !b.Spec.Unschedulable {
		t.Error("node b was drained by a user; node-manager must not uncordon it")
	}
}

func TestNodeNotReadyOrOnOldChecksumIsNotFinished(t *testing.T) {
	ns := []*corev1.Node{
		node("a", false, deckhousev1.ApprovedAnnotation, "", deckhousev1.ConfigurationChecksumAnnotation, sum),
		node("b", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.ConfigurationChecksumAnnotation, "old"),
	}
	out := after(Input{Group: group("w", maxc(intstr.FromInt32(2))), Checksum: sum, Nodes: ns, Now: noon})
	for _, n := range out {
		if !nodes.Has(n, deckhousev1.ApprovedAnnotation) {
			t.Errorf("node %s lost approved before it was Ready on the group's checksum", n.Name)
		}
	}
}

func TestManualNeverApprovesDisruptions(t *testing.T) {
	ns := []*corev1.Node{node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, ""), node("b", true)}
	out := after(Input{Group: group("w", mode(deckhousev1.ApprovalManual, nil)), Checksum: sum, Nodes: ns, Now: noon})
	if a := out["a"]; nodes.Has(a, deckhousev1.DisruptionApprovedAnnotation) || nodes.Has(a, deckhousev1.DrainingAnnotation) {
		t.Errorf("Manual mode acted on its own: %v", a.Annotations)
	}
	if s := nodes.State(out["a"], group("w", mode(deckhousev1.ApprovalManual, nil)), sum); s != nodes.StateWaitingForManualDisruptionApproval {
		t.Errorf("state %s, want %s", s, nodes.StateWaitingForManualDisruptionApproval)
	}
}

func TestAutomaticDrainsThenApprovesInsideItsWindow(t *testing.T) {
	window := deckhousev1.DisruptionWindow{From: "13:00", To: "14:00"}
	g := group("w", mode(deckhousev1.ApprovalAutomatic, nil, window))
	ns := []*corev1.Node{node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, ""), node("b", true)}

	d := Plan(Input{Group: g, Checksum: sum, Nodes: ns, Now: noon})
	if len(d.Changes) != 0 {
		t.Fatalf("outside the window: changes %v", d.Changes)
	}
	if want := time.Date(2026, 11, 18, 13, 0, 0, 0, time.UTC); !d.RecheckAt.Equal(want) {
		t.Errorf("recheck at %v, want %v", d.RecheckAt, want)
	}
	in := noon.Add(90 * time.Minute)
	out := after(Input{Group: g, Checksum: sum, Nodes: ns, Now: in})
	if !nodes.Has(out["a"], deckhousev1.DrainingAnnotation) || nodes.Has(out["a"], deckhousev1.DisruptionApprovedAnnotation) {
		t.Fatalf("inside the window: want draining first, got %v", out["a"].Annotations)
	}
	// Still draining, then failed: no approval.
	failed := node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.DrainingAnnotation, "bashible", deckhousev1.DrainFailedAnnotation, "timeout")
	if out := after(Input{Group: g, Checksum: sum, Nodes: []*corev1.Node{failed, ns[1]}, Now: in}); nodes.Has(out["a"], deckhousev1.DisruptionApprovedAnnotation) {
		t.Fatal("a failed drain led to a disruption approval")
	}
	drained := node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.DrainedAnnotation, "bashible")
	out = after(Input{Group: g, Checksum: sum, Nodes: []*corev1.Node{drained, ns[1]}, Now: in})
	if !nodes.Has(out["a"], deckhousev1.DisruptionApprovedAnnotation) || nodes.Has(out["a"], deckhousev1.DisruptionRequiredAnnotation) {
		t.Fatalf("drained node: want disruption-approved, got %v", out["a"].Annotations)
	}
}

// TestDrainIsSkippedOnlyWhereDeckhouseSkipsIt: the only master, the
// controller's node while it is its group's only Ready node, and groups
// with drainBeforeApproval off. A one-node worker group is drained.
func TestDrainIsSkippedOnlyWhereDeckhouseSkipsIt(t *testing.T) {
	asking := func() *corev1.Node {
		return node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "")
	}
	skipped := map[string]Input{
		"only master":                     {Group: group("master"), Nodes: []*corev1.Node{asking()}},
		"controller's node, only one":     {Group: group("w"), ControllerNode: "a", Nodes: []*corev1.Node{asking()}},
		"controller's node, other broken": {Group: group("w"), ControllerNode: "a", Nodes: []*corev1.Node{asking(), node("b", false)}},
		"turned off":                      {Group: group("w", mode(deckhousev1.ApprovalAutomatic, ptr.To(false))), Nodes: []*corev1.Node{asking(), node("b", true)}},
	}
	for name, in := range skipped {
		in.Checksum, in.Now = sum, noon
		out := after(in)
		if a := out["a"]; !nodes.Has(a, deckhousev1.DisruptionApprovedAnnotation) || nodes.Has(a, deckhousev1.DrainingAnnotation) {
			t.Errorf("%s: want disruption-approved without draining, got %v", name, a.Annotations)
		}
	}
	drained := map[string]Input{
		"only worker":                       {Group: group("w"), Nodes: []*corev1.Node{asking()}},
		"only worker, controller elsewhere": {Group: group("w"), ControllerNode: "m", Nodes: []*corev1.Node{asking()}},
		"controller's node, another Ready":  {Group: group("w"), ControllerNode: "a", Nodes: []*corev1.Node{asking(), node("b", true)}},
		"one of two masters":                {Group: group("master"), Nodes: []*corev1.Node{asking(), node("b", true)}},
	}
	for name, in := range drained {
		in.Checksum, in.Now = sum, noon
		out := after(in)
		if a := out["a"]; nodes.Has(a, deckhousev1.DisruptionApprovedAnnotation) || !nodes.Has(a, deckhousev1.DrainingAnnotation) {
			t.Errorf("%s: want drained first, got %v", name, a.Annotations)
		}
	}
}

// TestForeignCordonSurvivesTheUpdate: a node someone else cordoned before
// node-manager asked to drain it stays cordoned once its update is done,
// and when the window closes; a cordon of ours is lifted.
func TestForeignCordonSurvivesTheUpdate(t *testing.T) {
	g := group("w")
	cordoned := node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "")
	cordoned.Spec.Unschedulable = true
	out := after(Input{Group: g, Checksum: sum, Now: noon, Nodes: []*corev1.Node{cordoned, node("b", true)}})
	a := out["a"]
	if !nodes.Has(a, deckhousev1.DrainingAnnotation) || !nodes.Has(a, deckhousev1.ForeignCordonAnnotation) {
		t.Fatalf("drain of a cordoned node: %v; want draining with the foreign-cordon note", a.Annotations)
	}
	// Drained, then the update is applied: the cordon stays, the note goes.
	drain := func(n *corev1.Node) *corev1.Node {
		n = n.DeepCopy()
		delete(n.Annotations, deckhousev1.DrainingAnnotation)
		n.Annotations[deckhousev1.DrainedAnnotation] = deckhousev1.DrainSourceBashible
		return n
	}
	finished := drain(a)
	delete(finished.Annotations, deckhousev1.DisruptionRequiredAnnotation)
	finished.Annotations[deckhousev1.DisruptionApprovedAnnotation] = ""
	finished.Annotations[deckhousev1.ConfigurationChecksumAnnotation] = sum
	done := after(Input{Group: g, Checksum: sum, Now: noon, Nodes: []*corev1.Node{finished, node("b", true)}})["a"]
	if !done.Spec.Unschedulable || nodes.HasUpdateAnnotation(done) {
		t.Errorf("after the update: unschedulable %v, annotations %v; want still cordoned, no update annotation", done.Spec.Unschedulable, done.Annotations)
	}
	// The same node without the note (our own cordon) is uncordoned.
	ours := finished.DeepCopy()
	delete(ours.Annotations, deckhousev1.ForeignCordonAnnotation)
	if done := after(Input{Group: g, Checksum: sum, Now: noon, Nodes: []*corev1.Node{ours, node("b", true)}})["a"]; done.Spec.Unschedulable {
		t.Error("a node node-manager cordoned stayed cordoned after its update")
	}
	// The window closes mid-drain: the drain is called off, the cordon stays.
	later := noon.Add(2 * time.Hour)
	gw := group("w", mode(deckhousev1.ApprovalAutomatic, nil, deckhousev1.DisruptionWindow{From: "11:00", To: "13:00"}))
	off := after(Input{Group: gw, Checksum: sum, Now: later, Nodes: []*corev1.Node{drain(a), node("b", true)}})["a"]
	if !off.Spec.Unschedulable || nodes.Has(off, deckhousev1.DrainedAnnotation) || nodes.Has(off, deckhousev1.ForeignCordonAnnotation) {
		t.Errorf("window closed: unschedulable %v, annotations %v; want still cordoned, drain and note gone", off.Spec.Unschedulable, off.Annotations)
	}
}

func TestLastSchedulableReadyNodeIsNeitherDrainedNorDisrupted(t *testing.T) {
	cordoned := node("c", true)
	cordoned.Spec.Unschedulable = true
	for name, other := range map[string]*corev1.Node{
		"other NotReady": node("b", false),
		"other cordoned": cordoned,
		"other draining": node("b", true, deckhousev1.DrainingAnnotation, "user"),
	} {
		out := after(Input{Group: group("w"), Checksum: sum, Now: noon,
			Nodes: []*corev1.Node{node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, ""), other}})
		if a := out["a"]; nodes.Has(a, deckhousev1.DrainingAnnotation) || nodes.Has(a, deckhousev1.DisruptionApprovedAnnotation) {
			t.Errorf("%s: the last node pods can run on was acted on: %v", name, a.Annotations)
		}
	}
	// Two nodes both asking: only one drains in a pass.
	out := after(Input{Group: group("w", maxc(intstr.FromString("100%"))), Checksum: sum, Now: noon, Nodes: []*corev1.Node{
		node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, ""), node("b", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "")}})
	if nodes.Has(out["a"], deckhousev1.DrainingAnnotation) == nodes.Has(out["b"], deckhousev1.DrainingAnnotation) {
		t.Errorf("want exactly one of two nodes drained at once: a %v, b %v", out["a"].Annotations, out["b"].Annotations)
	}
}

func TestLeftoverRollingUpdateIsClearedInOtherModes(t *testing.T) {
	n := node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.RollingUpdateAnnotation, "", deckhousev1.ReplacementReportedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "")
	out := after(Input{Group: group("w"), Checksum: sum, Now: noon, Nodes: []*corev1.Node{n, node("b", true)}})
	if a := out["a"]; nodes.Has(a, deckhousev1.RollingUpdateAnnotation) || nodes.Has(a, deckhousev1.ReplacementReportedAnnotation) || !nodes.Has(a, deckhousev1.DrainingAnnotation) {
		t.Errorf("after switching to Automatic: %v; want rolling-update gone and the drain asked for", a.Annotations)
	}
}

func TestRollingUpdateMarksAndReportsOnce(t *testing.T) {
	g := group("w", mode(deckhousev1.ApprovalRollingUpdate, nil))
	n := node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.RollingUpdateAnnotation, "")
	d := Plan(Input{Group: g, Checksum: sum, Nodes: []*corev1.Node{n}, Now: noon})
	if len(d.Events) != 1 || d.Events[0].Reason != "ReplacementNeeded" {
		t.Fatalf("events %+v, want one ReplacementNeeded", d.Events)
	}
	d.Changes["a"].ApplyTo(n)
	if d := Plan(Input{Group: g, Checksum: sum, Nodes: []*corev1.Node{n}, Now: noon}); len(d.Events) != 0 || len(d.Changes) != 0 {
		t.Errorf("second pass: events %+v changes %v; want nothing new", d.Events, d.Changes)
	}
	if s := nodes.State(n, g, sum); s != nodes.StateRollingUpdate {
		t.Errorf("state %s, want RollingUpdate", s)
	}
	machine := node("b", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.MachineAnnotation, "md-1")
	d = Plan(Input{Group: g, Checksum: sum, Nodes: []*corev1.Node{machine}, Now: noon})
	if len(d.Events) != 0 || d.Changes["b"] == nil || d.Changes["b"].Annotations[deckhousev1.RollingUpdateAnnotation] == nil {
		t.Errorf("a machine-managed node should be marked rolling-update silently; got events %+v changes %v", d.Events, d.Changes)
	}
}

func TestUnknownChecksumDecidesNothing(t *testing.T) {
	d := Plan(Input{Group: group("w"), Nodes: []*corev1.Node{node("a", true, deckhousev1.WaitingForApprovalAnnotation, "")}, Now: noon})
	if len(d.Changes) != 0 {
		t.Errorf("changes %v without a checksum", d.Changes)
	}
}

func TestWindows(t *testing.T) {
	wed := time.Date(2026, 11, 18, 0, 0, 0, 0, time.UTC)
	at := func(day time.Time, hhmm string) time.Time {
		return day.Add(time.Duration(minutes(hhmm)) * time.Minute)
	}
	cases := []struct {
		w    deckhousev1.DisruptionWindow
		t    time.Time
		want bool
	}{
		{deckhousev1.DisruptionWindow{From: "08:00", To: "10:00"}, at(wed, "09:59"), true},
		{deckhousev1.DisruptionWindow{From: "08:00", To: "10:00"}, at(wed, "10:00"), false},
		{deckhousev1.DisruptionWindow{From: "08:00", To: "10:00", Days: []deckhousev1.Weekday{"Tue"}}, at(wed, "09:00"), false},
		{deckhousev1.DisruptionWindow{From: "22:00", To: "02:00", Days: []deckhousev1.Weekday{"Tue"}}, at(wed, "01:00"), true},
		{deckhousev1.DisruptionWindow{From: "22:00", To: "02:00", Days: []deckhousev1.Weekday{"Wed"}}, at(wed, "01:00"), false},
		{deckhousev1.DisruptionWindow{From: "22:00", To: "02:00", Days: []deckhousev1.Weekday{"Wed"}}, at(wed, "23:00"), true},
	}
	for _, c := range cases {
		if got := InWindow([]deckhousev1.DisruptionWindow{c.w}, c.t); got != c.want {
			t.Errorf("window %+v at %s: %v, want %v", c.w, c.t.Format("Mon 15:04"), got, c.want)
		}
	}
	if got, want := ClosesAt([]deckhousev1.DisruptionWindow{{From: "22:00", To: "02:00"}}, at(wed, "23:00")), at(wed, "26:00"); !got.Equal(want) {
		t.Errorf("a window over midnight closes at %v, want %v", got, want)
	}
	if got := ClosesAt([]deckhousev1.DisruptionWindow{{From: "08:00", To: "10:00"}}, at(wed, "12:00")); !got.IsZero() {
		t.Errorf("no window is open, yet it closes at %v", got)
	}
	next := NextOpening([]deckhousev1.DisruptionWindow{{From: "08:00", To: "10:00", Days: []deckhousev1.Weekday{"Mon"}}}, at(wed, "12:00"))
	if want := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC); !next.Equal(want) {
		t.Errorf("next opening %v, want %v", next, want)
	}
}

func TestDrainIsCalledOffWhenTheWindowCloses(t *testing.T) {
	window := deckhousev1.DisruptionWindow{From: "11:00", To: "12:30"}
	g := group("w", mode(deckhousev1.ApprovalAutomatic, nil, window))
	drained := node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.DrainedAnnotation, "bashible")
	drained.Spec.Unschedulable = true
	draining := node("b", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.DrainingAnnotation, "bashible", deckhousev1.DrainFailedAnnotation, "pdb")
	draining.Spec.Unschedulable = true
	user := node("c", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.DrainingAnnotation, "user")
	in := Input{Group: g, Checksum: sum, Nodes: []*corev1.Node{drained, draining, user, node("d", true)}}

	in.Now = noon
	d := Plan(in)
	if want := time.Date(2026, 11, 18, 12, 30, 0, 0, time.UTC); !d.RecheckAt.Equal(want) {
		t.Errorf("inside the window, recheck at %v; want its close %v", d.RecheckAt, want)
	}
	in.Now = noon.Add(time.Hour)
	out := after(in)
	for _, name := range []string{"a", "b"} {
		n := out[name]
		if nodes.Has(n, deckhousev1.DrainingAnnotation) || nodes.Has(n, deckhousev1.DrainedAnnotation) || nodes.Has(n, deckhousev1.DrainFailedAnnotation) || n.Spec.Unschedulable || nodes.Has(n, deckhousev1.DisruptionApprovedAnnotation) {
			t.Errorf("node %s after the window closed: %v unschedulable=%v; want our drain called off", name, n.Annotations, n.Spec.Unschedulable)
		}
	}
	if !nodes.Has(out["c"], deckhousev1.DrainingAnnotation) {
		t.Error("a user's drain was called off")
	}
}

func disruptedNames(m map[string]*corev1.Node) []string {
	var out []string
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		if n, ok := m[name]; ok && Disrupted(n) {
			out = append(out, name)
		}
	}
	return out
}

func TestDisruptionsAreBoundedByMaxConcurrent(t *testing.T) {
	for name, g := range map[string]*deckhousev1.NodeGroup{
		"drain first":   group("w", maxc(intstr.FromInt32(2))),
		"without drain": group("w", maxc(intstr.FromInt32(2)), mode(deckhousev1.ApprovalAutomatic, ptr.To(false))),
		"replacement":   group("w", maxc(intstr.FromInt32(2)), mode(deckhousev1.ApprovalRollingUpdate, nil)),
	} {
		// Five nodes hold an approval (a person approved them all) and ask
		// for a disruption at once.
		var ns []*corev1.Node
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			ns = append(ns, node(n, true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.MachineAnnotation, "m"))
		}
		if got := disruptedNames(after(Input{Group: g, Checksum: sum, Nodes: ns, Now: noon})); fmt.Sprint(got) != "[a b]" {
			t.Errorf("%s: disrupted %v; want a and b only (maxConcurrent 2)", name, got)
		}
		// One slot is taken by a node that is drained already: one more.
		ns[4] = node("e", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.DrainedAnnotation, "bashible")
		if got := disruptedNames(after(Input{Group: g, Checksum: sum, Nodes: ns, Now: noon})); len(got) != 2 || got[1] != "e" {
			t.Errorf("%s with e drained: disrupted %v; want e and one other", name, got)
		}
	}
}

func TestDisruptionIsGrantedOnlyToANodeWithAnUpdateApproval(t *testing.T) {
	for name, g := range map[string]*deckhousev1.NodeGroup{
		"drain first":   group("w", maxc(intstr.FromInt32(3))),
		"without drain": group("w", maxc(intstr.FromInt32(3)), mode(deckhousev1.ApprovalAutomatic, ptr.To(false))),
		"replacement":   group("w", maxc(intstr.FromInt32(3)), mode(deckhousev1.ApprovalRollingUpdate, nil)),
	} {
		// The node asks for both at once: it is approved for the update
		// first, and disrupted only in a later pass.
		ns := []*corev1.Node{node("a", true, deckhousev1.WaitingForApprovalAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.MachineAnnotation, "m"), node("b", true)}
		out := after(Input{Group: g, Checksum: sum, Nodes: ns, Now: noon})
		if a := out["a"]; Disrupted(a) || nodes.Has(a, deckhousev1.DrainingAnnotation) || !nodes.Has(a, deckhousev1.ApprovedAnnotation) {
			t.Errorf("%s: first pass %v; want approved, not disrupted", name, a.Annotations)
		}
		out = after(Input{Group: g, Checksum: sum, Nodes: []*corev1.Node{out["a"], out["b"]}, Now: noon})
		if a := out["a"]; !Disrupted(a) {
			t.Errorf("%s: second pass %v; want the disruption granted to the approved node", name, a.Annotations)
		}
		// Without an approval and without asking for one: nothing.
		ns = []*corev1.Node{node("a", true, deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.MachineAnnotation, "m"), node("b", true)}
		if d := Plan(Input{Group: g, Checksum: sum, Nodes: ns, Now: noon}); len(d.Changes) != 0 {
			t.Errorf("%s: a node without an update approval was granted %v", name, d.Changes["a"])
		}
	}
}

// A step that reboots on every boot made every node ask for a disruption
// after a reboot, without an update approval; the old Plan drained all but
// one of them at once.
func TestEveryNodeAskingForADisruptionAtOnceDisruptsAtMostMaxConcurrent(t *testing.T) {
	g := group("w")
	var ns []*corev1.Node
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		ns = append(ns, node(n, true, deckhousev1.DisruptionRequiredAnnotation, "", deckhousev1.WaitingForApprovalAnnotation, ""))
	}
	for pass := range 6 {
		out := after(Input{Group: g, Checksum: sum, Nodes: ns, Now: noon})
		if got := disruptedNames(out); len(got) > 1 {
			t.Fatalf("pass %d: disrupted %v at once with maxConcurrent 1", pass, got)
		}
		if got := approvedNames(out); len(got) > 1 {
			t.Fatalf("pass %d: approved %v at once with maxConcurrent 1", pass, got)
		}
		ns = ns[:0]
		for _, name := range []string{"a", "b", "c", "d", "e"} {
			n := out[name]
			if nodes.Has(n, deckhousev1.DrainingAnnotation) {
				drainedNode := n.DeepCopy()
				delete(drainedNode.Annotations, deckhousev1.DrainingAnnotation)
				drainedNode.Annotations[deckhousev1.DrainedAnnotation] = "bashible"
				n = drainedNode
			}
			ns = append(ns, n)
		}
	}
	if got := disruptedNames(after(Input{Group: g, Checksum: sum, Nodes: ns, Now: noon})); fmt.Sprint(got) != "[a]" {
		t.Errorf("disrupted %v; want a alone, still in its update", got)
	}
}

func TestNodeAPersonDisruptedIsApprovedFirstSoItsSlotIsFreed(t *testing.T) {
	// a holds the only approval and waits for a disruption slot; b holds
	// that slot (a person approved its disruption) and waits for an
	// approval. Approving b beyond the limit is the way out.
	ns := []*corev1.Node{
		node("a", true, deckhousev1.ApprovedAnnotation, "", deckhousev1.DisruptionRequiredAnnotation, ""),
		node("b", true, deckhousev1.WaitingForApprovalAnnotation, "", deckhousev1.DisruptionApprovedAnnotation, ""),
		node("c", true, deckhousev1.WaitingForApprovalAnnotation, ""),
	}
	out := after(Input{Group: group("w"), Checksum: sum, Nodes: ns, Now: noon})
	if got := approvedNames(out); fmt.Sprint(got) != "[a b]" {
		t.Errorf("approved %v; want a and the disrupted b (not c)", got)
	}
	if nodes.Has(out["a"], deckhousev1.DrainingAnnotation) {
		t.Error("a was drained while b holds the only disruption slot")
	}
	// Once b reports the checksum its disruption ends, and a may go.
	done := node("b", true, deckhousev1.ConfigurationChecksumAnnotation, sum, deckhousev1.DisruptionApprovedAnnotation, "")
	out = after(Input{Group: group("w"), Checksum: sum, Nodes: []*corev1.Node{out["a"], done, out["c"]}, Now: noon})
	if Disrupted(out["b"]) || !nodes.Has(out["a"], deckhousev1.DrainingAnnotation) {
		t.Errorf("after b finished: b %v, a %v; want b cleaned and a draining", out["b"].Annotations, out["a"].Annotations)
	}
}
