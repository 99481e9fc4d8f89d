package approval

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// A group with canaries or a soak time (spec.update.canaries,
// spec.update.soakTime) is updated in batches: the canaries first, then
// maxConcurrent nodes at a time. A batch is approved only when the one
// before it has finished (every node reports the group's checksum and is
// Ready) and has soaked (stayed so for soakTime). A node of the batch in
// progress whose bashible run fails (its Instance's BashibleReady turns
// False after the batch began) or that goes NotReady after applying the
// configuration halts the rollout: nobody else is approved until a new
// configuration (a new checksum starts a new rollout, canaries first) or
// the group's ResumeRolloutAnnotation lets it go on. The record of it all
// is Rollout, kept on the group (RolloutStateAnnotation), so that a
// restarted controller carries on mid-soak.

// The reasons of the RolloutHalted condition.
const (
	// ConditionRolloutHalted is True while a group's rollout is halted.
	ConditionRolloutHalted = "RolloutHalted"
	// ReasonBashibleFailed: a node of the batch failed a bashible run.
	ReasonBashibleFailed = "BashibleFailed"
	// ReasonNodeNotReady: a node of the batch went NotReady after applying.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonRolloutProceeding: nothing halts the rollout.
	ReasonRolloutProceeding = "RolloutProceeding"
)

// Rollout is update approval's record of a gated group's rollout of one
// checksum (RolloutStateAnnotation). Times are whole seconds, as bashible
// writes its conditions' times.
type Rollout struct {
	// Checksum is the configuration being rolled out; a new one starts
	// the record afresh (and so resumes a halted rollout).
	Checksum string `json:"checksum"`
	// Canaries are the nodes that took the configuration as canaries and
	// soaked; while fewer than spec.update.canaries, batches are canaries.
	Canaries []string `json:"canaries,omitempty"`
	// Batch are the nodes approved in the batch in progress, since
	// BatchStart; empty between batches.
	Batch      []string     `json:"batch,omitempty"`
	BatchStart *metav1.Time `json:"batchStart,omitempty"`
	// SoakUntil is when the finished batch has soaked; unset while it runs.
	SoakUntil *metav1.Time `json:"soakUntil,omitempty"`
	// Halt is why the rollout is halted; nil while it is not.
	Halt *Halt `json:"halt,omitempty"`
	// Excused are failures a person let pass with ResumeRolloutAnnotation:
	// each node's failure by the time it began. A later failure of the
	// same node halts again.
	Excused map[string]metav1.Time `json:"excused,omitempty"`
}

// Halt says which node halted the rollout, how, and since when.
type Halt struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
	// Step is the bashible step that failed, when bashible named one.
	Step string `json:"step,omitempty"`
	// Message is what the node reported (the Instance's BashibleReady
	// message, or the Node's Ready message).
	Message string `json:"message"`
	// Output is the failed step's last lines of output, from bashible's
	// BashibleStepFailed Event; filled in by the controller, not by Plan.
	Output string `json:"output,omitempty"`
	// FailedAt is when the failure began (the condition's transition).
	FailedAt metav1.Time `json:"failedAt"`
}

// MaxNodeText is the most of what a node wrote (its Instance's
// BashibleReady message, its Ready condition's message, the last output of
// its failed step) that a halt quotes. A node writes those as it likes (a
// kubelet's Ready message is unbounded), and the halt goes into the
// RolloutHalted condition (whose message the API bounds to 32 KiB: one
// longer fails every sync of the group), the group's record annotation and
// an Event.
const MaxNodeText = 1024

// clip cuts what a node wrote to MaxNodeText bytes, on a rune boundary,
// marking the cut.
func clip(s string) string {
	if len(s) <= MaxNodeText {
		return s
	}
	const mark = "…"
	cut := MaxNodeText - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Describe is the halt as the RolloutHalted condition and the Event say it.
func (h *Halt) Describe(group, checksum string) string {
	what := "went NotReady after applying the configuration"
	if h.Reason == ReasonBashibleFailed {
		what = "failed its bashible run"
		if h.Step != "" {
			what = "failed bashible step " + clip(h.Step)
		}
	}
	// Clipped again: a record written by an older controller may hold
	// what a node wrote whole.
	msg := fmt.Sprintf("the rollout of configuration %.12s halted: node %s %s: %s", checksum, h.Node, what, clip(h.Message))
	if h.Output != "" {
		msg += "; last output: " + clip(h.Output)
	}
	return msg + fmt.Sprintf("; no other node is approved until a new configuration, or kubectl annotate nodegroup %s %s=", group, deckhousev1.ResumeRolloutAnnotation)
}

// ParseRollout reads a group's RolloutStateAnnotation; a missing or
// unreadable one is an empty record (the rollout starts over with the
// batch in progress, rebuilt from the approved nodes).
func ParseRollout(g *deckhousev1.NodeGroup) Rollout {
	var r Rollout
	if v, ok := g.Annotations[deckhousev1.RolloutStateAnnotation]; ok {
		if json.Unmarshal([]byte(v), &r) != nil {
			return Rollout{}
		}
	}
	return r
}

// Encode is the record as RolloutStateAnnotation holds it.
func (r Rollout) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// Canaries is the group's canary count (0 without canaries).
func Canaries(g *deckhousev1.NodeGroup) int {
	if g.Spec.Update == nil || g.Spec.Update.Canaries == nil {
		return 0
	}
	return int(*g.Spec.Update.Canaries)
}

// SoakTime is the group's soak time (0 without one).
func SoakTime(g *deckhousev1.NodeGroup) time.Duration {
	if g.Spec.Update == nil || g.Spec.Update.SoakTime == nil {
		return 0
	}
	return g.Spec.Update.SoakTime.Duration
}

// Gated reports whether the group is updated in batches with a halt:
// it has canaries or a soak time.
func Gated(g *deckhousev1.NodeGroup) bool {
	return Canaries(g) > 0 || SoakTime(g) > 0
}

// stepName finds the step in bashible's failure note ("step 050_x failed
// with exit status 1 ...", templates/tree/bashible.sh.tpl).
var stepName = regexp.MustCompile(`\bstep (\S+) (?:failed|was killed)`)

// gate is the rollout gate of one decision: what the batch in progress
// allows, worked out from the record and the nodes.
type gate struct {
	r        Rollout
	resumed  bool // the resume annotation was read (and is to be removed)
	halted   *Halt
	canaries int
	soak     time.Duration
}

// second truncates t to the whole seconds the record keeps (a batch's
// start: a failure within its first second still counts).
func second(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

// secondUp rounds t up to whole seconds (a soak's end: never shorter
// than asked).
func secondUp(t time.Time) metav1.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return metav1.NewTime(r.Add(time.Second))
	}
	return metav1.NewTime(t)
}

// openGate starts a decision for a gated group: it starts a new record
// for a new checksum, applies a resume, adds approved nodes to the batch
// (an approval whose record was lost), and halts on a failure of the batch.
func openGate(in Input, view []*corev1.Node) *gate {
	gt := &gate{r: in.Rollout, canaries: Canaries(in.Group), soak: SoakTime(in.Group)}
	if gt.r.Checksum != in.Checksum {
		gt.r = Rollout{Checksum: in.Checksum}
	}
	if in.Resume {
		gt.resumed = true
		if h := gt.r.Halt; h != nil {
			if gt.r.Excused == nil {
				gt.r.Excused = map[string]metav1.Time{}
			}
			gt.r.Excused[h.Node] = h.FailedAt
			gt.r.Halt = nil
		}
	}
	in2 := map[string]*corev1.Node{}
	for _, n := range view {
		in2[n.Name] = n
	}
	// The batch: its recorded nodes still in the group, and every approved
	// node. While the batch runs, a recorded node that neither holds its
	// approval nor has applied the configuration is dropped (its approval
	// never landed, or was taken back); once it soaks, its nodes stay
	// (one may ask again, for a reboot, and waits for the soak's end).
	batch := gt.r.Batch[:0:0]
	for _, name := range gt.r.Batch {
		n := in2[name]
		if n != nil && (gt.r.SoakUntil != nil || nodes.Has(n, deckhousev1.ApprovedAnnotation) || n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == in.Checksum) {
			batch = append(batch, name)
		}
	}
	for _, n := range view {
		// An excused node that keeps failing holds its approval (and its
		// update slot, as any failing node does) past its batch.
		_, excused := gt.r.Excused[n.Name]
		if nodes.Has(n, deckhousev1.ApprovedAnnotation) && !excused && !slices.Contains(batch, n.Name) {
			batch = append(batch, n.Name)
		}
	}
	slices.Sort(batch)
	gt.r.Batch = batch
	if len(batch) > 0 && gt.r.BatchStart == nil {
		s := second(in.Now)
		gt.r.BatchStart = &s
	}
	if len(batch) == 0 {
		gt.r.BatchStart, gt.r.SoakUntil = nil, nil
	}
	if gt.r.Halt == nil {
		for _, name := range batch {
			if h := gt.failure(in2[name], in.Instances[name], in.Checksum); h != nil {
				gt.r.Halt, gt.halted = h, h
				break
			}
		}
	}
	return gt
}

// failure is the node's failure in the batch in progress, nil when there
// is none or a person excused it: a bashible run failed since the batch
// began, or the node applied the configuration and went NotReady since.
func (gt *gate) failure(n *corev1.Node, inst *deckhousev1alpha1.Instance, checksum string) *Halt {
	since := gt.r.BatchStart.Time
	excused := func(at metav1.Time) bool {
		e, ok := gt.r.Excused[n.Name]
		return ok && !at.Time.After(e.Time)
	}
	if inst != nil {
		if c := meta.FindStatusCondition(inst.Status.Conditions, "BashibleReady"); c != nil && c.Status == metav1.ConditionFalse &&
			!c.LastTransitionTime.Time.Before(since) && !excused(c.LastTransitionTime) {
			h := &Halt{Node: n.Name, Reason: ReasonBashibleFailed, Message: clip(c.Message), FailedAt: second(c.LastTransitionTime.Time)}
			if m := stepName.FindStringSubmatch(c.Message); m != nil {
				h.Step = m[1]
			}
			return h
		}
	}
	if n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == checksum && !nodes.IsReady(n) {
		at, msg := readyTransition(n)
		if !at.Time.Before(since) && !excused(at) {
			return &Halt{Node: n.Name, Reason: ReasonNodeNotReady, Message: clip(msg), FailedAt: second(at.Time)}
		}
	}
	return nil
}

// readyTransition is when the node's Ready condition last changed, and its message.
func readyTransition(n *corev1.Node) (metav1.Time, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			msg := c.Message
			if msg == "" {
				msg = "Ready is " + string(c.Status)
			}
			return c.LastTransitionTime, msg
		}
	}
	return metav1.Time{}, "the node reports no Ready condition"
}

// settle looks at the batch in progress after the finished updates were
// cleared: once every node of it has applied the configuration (or
// failed, excused), its soak starts; once soaked, the batch is accepted
// (its nodes join the canaries while those are wanted) and the next may
// begin. It asks d for a look when the soak ends.
func (gt *gate) settle(view []*corev1.Node, now time.Time, d *Decision) {
	if len(gt.r.Batch) == 0 || gt.r.Halt != nil {
		return
	}
	byName := map[string]*corev1.Node{}
	for _, n := range view {
		byName[n.Name] = n
	}
	for _, name := range gt.r.Batch {
		n := byName[name]
		_, excused := gt.r.Excused[name]
		if nodes.Has(n, deckhousev1.ApprovedAnnotation) && !excused {
			return // still updating
		}
	}
	if gt.r.SoakUntil == nil {
		u := secondUp(now.Add(gt.soak))
		gt.r.SoakUntil = &u
	}
	if now.Before(gt.r.SoakUntil.Time) {
		d.recheck(gt.r.SoakUntil.Time)
		return
	}
	if len(gt.r.Canaries) < gt.canaries {
		gt.r.Canaries = append(gt.r.Canaries, gt.r.Batch...)
	}
	gt.r.Batch, gt.r.BatchStart, gt.r.SoakUntil = nil, nil, nil
}

// room is how many nodes the gate lets be approved now: none while halted
// or while a batch soaks; otherwise what the batch lacks of its size,
// maxConcurrent (limit) or the canaries still wanted. A batch that runs is
// full unless an approval of it never landed (a conflict, an error): its
// node was dropped from the batch, and its slot is filled again, so a
// failed write never shrinks a batch for good. Nodes that finished stay
// in the batch until it soaks, so they keep their slots.
func (gt *gate) room(limit int) int {
	if gt.r.Halt != nil || gt.r.SoakUntil != nil {
		return 0
	}
	size := limit
	if left := gt.canaries - len(gt.r.Canaries); left > 0 {
		size = min(left, limit)
	}
	return max(size-len(gt.r.Batch), 0)
}

// admit records an approval in the batch.
func (gt *gate) admit(n string, now time.Time) {
	if len(gt.r.Batch) == 0 {
		s := second(now)
		gt.r.BatchStart = &s
	}
	gt.r.Batch = append(gt.r.Batch, n)
	slices.Sort(gt.r.Batch)
}
