package approval

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

const soak = 30 * time.Second

// gatedGroup has canaries canaries, a soak time of soak and maxConcurrent max.
func gatedGroup(canaries int32, max int) *deckhousev1.NodeGroup {
	return group("w", func(g *deckhousev1.NodeGroup) {
		mc := intstr.FromInt32(int32(max))
		g.Spec.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &mc, Canaries: ptr.To(canaries), SoakTime: &metav1.Duration{Duration: soak}}
	})
}

func waitingNode(name string) *corev1.Node {
	return node(name, true, deckhousev1.WaitingForApprovalAnnotation, "")
}

func approvedNode(name string) *corev1.Node {
	return node(name, true, deckhousev1.ApprovedAnnotation, "")
}

// doneNode applied sum and was cleared.
func doneNode(name string, ready bool) *corev1.Node {
	n := node(name, ready, deckhousev1.ConfigurationChecksumAnnotation, sum)
	n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(noon.Add(5 * time.Second))
	return n
}

// approvedDoneNode applied sum and is still approved (not Ready, so not cleared).
func approvedDoneNode(name string, ready bool) *corev1.Node {
	n := doneNode(name, ready)
	n.Annotations[deckhousev1.ApprovedAnnotation] = ""
	return n
}

func failed(name, msg string, at time.Time) *deckhousev1alpha1.Instance {
	return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: deckhousev1alpha1.InstanceStatus{
		Conditions: []metav1.Condition{{Type: "BashibleReady", Status: metav1.ConditionFalse, Reason: "StepsFailed", Message: msg, LastTransitionTime: metav1.NewTime(at)}}}}
}

func at(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

// batchOf is a record of a batch of names that began at noon.
func batchOf(names ...string) Rollout {
	return Rollout{Checksum: sum, Batch: names, BatchStart: at(noon)}
}

const stepNote = "step 050_broken failed with exit status 1 after 0s (attempt 1 of 3)"

func TestGatedRolloutDecisions(t *testing.T) {
	cases := []struct {
		name      string
		group     *deckhousev1.NodeGroup
		rollout   Rollout
		resume    bool
		nodes     []*corev1.Node
		instances []*deckhousev1alpha1.Instance
		now       time.Time
		// want
		approved  []string
		batch     []string
		canaries  []string
		soakUntil *metav1.Time
		halt      *Halt // Node, Reason, Step compared
		newHalt   bool
		recheck   time.Time
	}{
		{
			name:  "a new configuration goes to the canary alone, whatever maxConcurrent allows",
			group: gatedGroup(1, 3), rollout: Rollout{Checksum: "old"},
			nodes:    []*corev1.Node{waitingNode("a"), waitingNode("b"), waitingNode("c"), waitingNode("d")},
			now:      noon,
			approved: []string{"a"}, batch: []string{"a"},
		},
		{
			name:  "two canaries with maxConcurrent 1 go one at a time",
			group: gatedGroup(2, 1), rollout: Rollout{Checksum: sum},
			nodes:    []*corev1.Node{waitingNode("a"), waitingNode("b"), waitingNode("c")},
			now:      noon,
			approved: []string{"a"}, batch: []string{"a"},
		},
		{
			name:  "nobody else is approved while the canary updates",
			group: gatedGroup(1, 3), rollout: batchOf("a"),
			nodes:    []*corev1.Node{approvedNode("a"), waitingNode("b"), waitingNode("c")},
			now:      noon.Add(time.Minute),
			approved: []string{"a"}, batch: []string{"a"},
		},
		{
			// The record names c, but its approval never landed (a
			// conflict): c is dropped from the batch and approved again,
			// so the batch keeps its two slots and d still waits.
			name:  "a batch whose approval did not land is filled again, not shrunk",
			group: gatedGroup(1, 2), rollout: Rollout{Checksum: sum, Canaries: []string{"a"}, Batch: []string{"b", "c"}, BatchStart: at(noon)},
			nodes:    []*corev1.Node{doneNode("a", true), approvedNode("b"), waitingNode("c"), waitingNode("d")},
			now:      noon.Add(2 * time.Second),
			approved: []string{"b", "c"}, batch: []string{"b", "c"}, canaries: []string{"a"},
		},
		{
			name:  "a batch where one node finished is not topped up",
			group: gatedGroup(1, 2), rollout: Rollout{Checksum: sum, Canaries: []string{"a"}, Batch: []string{"b", "c"}, BatchStart: at(noon)},
			nodes:    []*corev1.Node{doneNode("a", true), doneNode("b", true), approvedNode("c"), waitingNode("d")},
			now:      noon.Add(10 * time.Second),
			approved: []string{"c"}, batch: []string{"b", "c"}, canaries: []string{"a"},
		},
		{
			name:  "the canary applied the configuration: its soak starts, nobody else is approved",
			group: gatedGroup(1, 3), rollout: batchOf("a"),
			nodes:    []*corev1.Node{doneNode("a", true), waitingNode("b"), waitingNode("c")},
			now:      noon.Add(10 * time.Second),
			approved: nil, batch: []string{"a"}, soakUntil: at(noon.Add(10*time.Second + soak)), recheck: noon.Add(10*time.Second + soak),
		},
		{
			name:  "mid-soak (as after a restart: the record says so) nobody is approved",
			group: gatedGroup(1, 3), rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon), SoakUntil: at(noon.Add(soak))},
			nodes:    []*corev1.Node{doneNode("a", true), waitingNode("b"), waitingNode("c")},
			now:      noon.Add(soak - time.Second),
			approved: nil, batch: []string{"a"}, soakUntil: at(noon.Add(soak)), recheck: noon.Add(soak),
		},
		{
			name:  "the soak is over: the canary is accepted and a batch of maxConcurrent follows",
			group: gatedGroup(1, 2), rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon), SoakUntil: at(noon.Add(soak))},
			nodes:    []*corev1.Node{doneNode("a", true), waitingNode("b"), waitingNode("c"), waitingNode("d")},
			now:      noon.Add(soak),
			approved: []string{"b", "c"}, batch: []string{"b", "c"}, canaries: []string{"a"},
		},
		{
			name:  "a later batch is soaked too, and does not count as canaries",
			group: gatedGroup(1, 2), rollout: Rollout{Checksum: sum, Canaries: []string{"a"}, Batch: []string{"b", "c"}, BatchStart: at(noon), SoakUntil: at(noon.Add(soak))},
			nodes:    []*corev1.Node{doneNode("a", true), doneNode("b", true), doneNode("c", true), waitingNode("d")},
			now:      noon.Add(soak),
			approved: []string{"d"}, batch: []string{"d"}, canaries: []string{"a"},
		},
		{
			name:  "the canary's bashible run fails: the rollout halts, naming the node and the step",
			group: gatedGroup(1, 3), rollout: batchOf("a"),
			nodes:     []*corev1.Node{approvedNode("a"), waitingNode("b")},
			instances: []*deckhousev1alpha1.Instance{failed("a", stepNote, noon.Add(3*time.Second))},
			now:       noon.Add(4 * time.Second),
			approved:  []string{"a"}, batch: []string{"a"},
			halt: &Halt{Node: "a", Reason: ReasonBashibleFailed, Step: "050_broken"}, newHalt: true,
		},
		{
			name:  "a halted rollout approves nobody, long after",
			group: gatedGroup(1, 3), rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon), Halt: &Halt{Node: "a", Reason: ReasonBashibleFailed, FailedAt: *at(noon)}},
			nodes:    []*corev1.Node{doneNode("a", true), waitingNode("b")},
			now:      noon.Add(time.Hour),
			approved: nil, batch: []string{"a"},
			halt: &Halt{Node: "a", Reason: ReasonBashibleFailed},
		},
		{
			name:  "a failure from before the batch began does not halt it",
			group: gatedGroup(1, 3), rollout: batchOf("a"),
			nodes:     []*corev1.Node{approvedNode("a"), waitingNode("b")},
			instances: []*deckhousev1alpha1.Instance{failed("a", stepNote, noon.Add(-time.Hour))},
			now:       noon.Add(time.Second),
			approved:  []string{"a"}, batch: []string{"a"},
		},
		{
			name:  "a canary that goes NotReady after applying halts the rollout",
			group: gatedGroup(1, 3), rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon), SoakUntil: at(noon.Add(soak))},
			nodes:    []*corev1.Node{doneNode("a", false), waitingNode("b")},
			now:      noon.Add(soak),
			approved: nil, batch: []string{"a"}, soakUntil: at(noon.Add(soak)),
			halt: &Halt{Node: "a", Reason: ReasonNodeNotReady}, newHalt: true,
		},
		{
			name:  "a node NotReady before it was approved does not halt (its update may mend it)",
			group: gatedGroup(1, 3), rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon.Add(time.Minute))},
			nodes:    []*corev1.Node{approvedDoneNode("a", false), waitingNode("b")},
			now:      noon.Add(2 * time.Minute),
			approved: []string{"a"}, batch: []string{"a"},
		},
		{
			name:  "the resume annotation lets the failed canary pass: the rollout goes on",
			group: gatedGroup(1, 2), resume: true,
			rollout:   Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon), Halt: &Halt{Node: "a", Reason: ReasonBashibleFailed, FailedAt: *at(noon.Add(3 * time.Second))}},
			nodes:     []*corev1.Node{approvedNode("a"), waitingNode("b"), waitingNode("c"), waitingNode("d")},
			instances: []*deckhousev1alpha1.Instance{failed("a", stepNote, noon.Add(3*time.Second))},
			now:       noon.Add(time.Minute),
			// The batch is settled: it soaks, as any batch.
			approved: []string{"a"}, batch: []string{"a"}, soakUntil: at(noon.Add(time.Minute + soak)), recheck: noon.Add(time.Minute + soak),
		},
		{
			name:  "a failed node let pass keeps its slot past its batch, as any failing node",
			group: gatedGroup(1, 2),
			rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon), SoakUntil: at(noon.Add(soak)),
				Excused: map[string]metav1.Time{"a": *at(noon.Add(3 * time.Second))}},
			nodes:     []*corev1.Node{approvedNode("a"), waitingNode("b"), waitingNode("c"), waitingNode("d")},
			instances: []*deckhousev1alpha1.Instance{failed("a", stepNote, noon.Add(3*time.Second))},
			now:       noon.Add(soak),
			// maxConcurrent 2, a holds one: one more.
			approved: []string{"a", "b"}, batch: []string{"b"}, canaries: []string{"a"},
		},
		{
			name:  "after a resume, a new failure of the same node halts again",
			group: gatedGroup(1, 3),
			rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon),
				Excused: map[string]metav1.Time{"a": *at(noon.Add(3 * time.Second))}},
			nodes:     []*corev1.Node{approvedNode("a"), waitingNode("b")},
			instances: []*deckhousev1alpha1.Instance{failed("a", stepNote, noon.Add(time.Minute))},
			now:       noon.Add(2 * time.Minute),
			approved:  []string{"a"}, batch: []string{"a"},
			halt: &Halt{Node: "a", Reason: ReasonBashibleFailed, Step: "050_broken"}, newHalt: true,
		},
		{
			name:  "a new configuration resumes a halted rollout, canaries first",
			group: gatedGroup(1, 3),
			rollout: Rollout{Checksum: "old", Canaries: []string{"c"}, Batch: []string{"a"}, BatchStart: at(noon),
				Halt: &Halt{Node: "a", Reason: ReasonBashibleFailed, FailedAt: *at(noon)}},
			nodes:    []*corev1.Node{waitingNode("a"), waitingNode("b"), waitingNode("c")},
			now:      noon.Add(time.Hour),
			approved: []string{"a"}, batch: []string{"a"},
		},
		{
			name:  "a recorded approval that never landed leaves the batch",
			group: gatedGroup(1, 3), rollout: batchOf("a"),
			nodes:    []*corev1.Node{waitingNode("a"), waitingNode("b")},
			now:      noon.Add(time.Second),
			approved: []string{"a"}, batch: []string{"a"},
		},
		{
			name:  "an approved node the record lost joins the batch",
			group: gatedGroup(1, 3), rollout: Rollout{Checksum: sum},
			nodes:    []*corev1.Node{approvedNode("b"), waitingNode("a")},
			now:      noon,
			approved: []string{"b"}, batch: []string{"b"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			insts := map[string]*deckhousev1alpha1.Instance{}
			for _, i := range tc.instances {
				insts[i.Name] = i
			}
			in := Input{Group: tc.group, Checksum: sum, Nodes: tc.nodes, Now: tc.now, Rollout: tc.rollout, Resume: tc.resume, Instances: insts}
			d := Plan(in)
			if got := approvedNames(after(in)); !slices.Equal(got, tc.approved) {
				t.Errorf("approved %v, want %v", got, tc.approved)
			}
			r := d.Rollout
			if r == nil {
				t.Fatal("a gated group's decision keeps no record")
			}
			if r.Checksum != sum {
				t.Errorf("record of %q, want the group's checksum", r.Checksum)
			}
			if !slices.Equal(r.Batch, tc.batch) {
				t.Errorf("batch %v, want %v", r.Batch, tc.batch)
			}
			if !slices.Equal(r.Canaries, tc.canaries) {
				t.Errorf("canaries %v, want %v", r.Canaries, tc.canaries)
			}
			if (r.SoakUntil == nil) != (tc.soakUntil == nil) || r.SoakUntil != nil && !r.SoakUntil.Equal(tc.soakUntil) {
				t.Errorf("soak until %v, want %v", r.SoakUntil, tc.soakUntil)
			}
			switch {
			case tc.halt == nil && r.Halt != nil:
				t.Errorf("halted: %+v", r.Halt)
			case tc.halt != nil && (r.Halt == nil || r.Halt.Node != tc.halt.Node || r.Halt.Reason != tc.halt.Reason || r.Halt.Step != tc.halt.Step):
				t.Errorf("halt %+v, want %+v", r.Halt, tc.halt)
			}
			if (d.Halted != nil) != tc.newHalt {
				t.Errorf("new halt %+v, want one: %v", d.Halted, tc.newHalt)
			}
			if d.Resumed != tc.resume {
				t.Errorf("resumed %v, want %v", d.Resumed, tc.resume)
			}
			if !d.RecheckAt.Equal(tc.recheck) {
				t.Errorf("recheck at %v, want %v", d.RecheckAt, tc.recheck)
			}
			if again := ParseRollout(&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				deckhousev1.RolloutStateAnnotation: r.Encode()}}}); again.Encode() != r.Encode() {
				t.Errorf("the record does not survive the annotation: %s became %s", r.Encode(), again.Encode())
			}
		})
	}
}

func TestAGroupWithoutCanariesOrSoakKeepsNoRecordAndNeverHalts(t *testing.T) {
	in := Input{Group: group("w"), Checksum: sum, Now: noon,
		Nodes:     []*corev1.Node{approvedNode("a"), waitingNode("b")},
		Instances: map[string]*deckhousev1alpha1.Instance{"a": failed("a", stepNote, noon)}}
	d := Plan(in)
	if d.Rollout != nil || d.Halted != nil {
		t.Errorf("record %+v, halt %+v: want none", d.Rollout, d.Halted)
	}
}

func TestTheHaltSaysNodeStepOutputAndHowToResume(t *testing.T) {
	h := &Halt{Node: "w-1", Reason: ReasonBashibleFailed, Step: "050_broken", Message: stepNote, Output: "E: no such package"}
	msg := h.Describe("w", sum)
	for _, want := range []string{"node w-1", "step 050_broken", "E: no such package", sum[:12], "kubectl annotate nodegroup w " + deckhousev1.ResumeRolloutAnnotation + "="} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
}

func TestAnUnreadableRecordStartsOver(t *testing.T) {
	g := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{deckhousev1.RolloutStateAnnotation: "{not json"}}}
	if r := ParseRollout(g); r.Checksum != "" || r.Halt != nil {
		t.Errorf("got %+v", r)
	}
}

// TestWhatANodeWroteIsClippedInTheHalt: a node's Ready message (a kubelet
// writes it as long as it likes) and its failed step's output are quoted
// in the RolloutHalted condition, whose message the API bounds to 32 KiB:
// whole, a 40 KiB one made every sync of the group fail. The halt quotes
// at most MaxNodeText bytes of each, cut on a rune boundary.
func TestWhatANodeWroteIsClippedInTheHalt(t *testing.T) {
	long := strings.Repeat("ж", 20*1024) // 40 KiB, two bytes a rune
	n := doneNode("a", false)
	n.Status.Conditions[0].Message = long
	d := Plan(Input{Group: gatedGroup(1, 3), Checksum: sum, Now: noon.Add(soak),
		Rollout: Rollout{Checksum: sum, Batch: []string{"a"}, BatchStart: at(noon), SoakUntil: at(noon.Add(soak))},
		Nodes:   []*corev1.Node{n, waitingNode("b")}})
	if d.Halted == nil || d.Halted.Reason != ReasonNodeNotReady {
		t.Fatalf("halt %+v, want one for a NotReady canary", d.Halted)
	}
	d.Halted.Output = long // as lastOutput would quote a long Event note
	for what, s := range map[string]string{"the halt's message": d.Halted.Message, "the halt's output": clip(d.Halted.Output)} {
		if len(s) > MaxNodeText || !utf8.ValidString(s) {
			t.Errorf("%s: %d bytes (valid UTF-8: %v), want at most %d", what, len(s), utf8.ValidString(s), MaxNodeText)
		}
	}
	// A record written before the clip quotes a node whole; Describe clips it.
	old := &Halt{Node: "a", Reason: ReasonBashibleFailed, Step: long, Message: long, Output: long}
	const conditionMessageLimit = 32 * 1024
	for _, h := range []*Halt{d.Halted, old} {
		msg := h.Describe("w", sum)
		if len(msg) > conditionMessageLimit || !utf8.ValidString(msg) {
			t.Errorf("RolloutHalted message of %d bytes (valid UTF-8: %v); the API refuses more than %d", len(msg), utf8.ValidString(msg), conditionMessageLimit)
		}
		if !strings.Contains(msg, "kubectl annotate nodegroup w "+deckhousev1.ResumeRolloutAnnotation+"=") {
			t.Errorf("the clipped halt lost how to resume: %.200s…", msg)
		}
	}
}
