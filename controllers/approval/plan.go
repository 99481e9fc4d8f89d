package approval

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// Input is everything one decision for one group depends on.
type Input struct {
	Group *deckhousev1.NodeGroup
	// Checksum is the group's current configuration checksum, from its
	// NodeGroupBundle. Empty means unknown: nothing is decided.
	Checksum string
	Nodes    []*corev1.Node
	Now      time.Time
	// ControllerNode is the node node-manager-controller runs on
	// (--node-name); empty when unknown. Like Deckhouse's node, it is not
	// drained while it is its group's only Ready node.
	ControllerNode string
	// Rollout is the group's rollout record (ParseRollout), read when the
	// group is Gated.
	Rollout Rollout
	// Resume says the group carries ResumeRolloutAnnotation.
	Resume bool
	// Instances are the Instances of the group's nodes, by name, where
	// bashible reports its runs; read when the group is Gated.
	Instances map[string]*deckhousev1alpha1.Instance
}

// Event is something worth telling people about a node.
type Event struct {
	Node    string
	Type    string // Normal or Warning
	Reason  string
	Message string
}

// Decision is what to change on which node, what to report, and when the
// group should be looked at again even if nothing else changes.
type Decision struct {
	Changes map[string]*nodes.Change
	Events  []Event
	// RecheckAt is when a disruption window next opens or a batch's soak
	// ends, if a node waits for it.
	RecheckAt time.Time
	// Rollout is the group's rollout record to keep; nil when the group
	// is not Gated (and keeps none).
	Rollout *Rollout
	// Halted is the halt this decision found, nil if none is new.
	Halted *Halt
	// Resumed says the resume annotation was read and is to be removed.
	Resumed bool
}

// recheck asks for a look at t (the earliest one asked for wins).
func (d *Decision) recheck(t time.Time) {
	if !t.IsZero() && (d.RecheckAt.IsZero() || t.Before(d.RecheckAt)) {
		d.RecheckAt = t
	}
}

func (d *Decision) change(n string) *nodes.Change {
	if d.Changes[n] == nil {
		d.Changes[n] = &nodes.Change{}
	}
	return d.Changes[n]
}

// MaxConcurrent is how many nodes of a group of size n may be approved at
// once: the number, or the percentage of n rounded down, and at least 1.
func MaxConcurrent(v string, n int) int {
	limit := 1
	if p, ok := strings.CutSuffix(v, "%"); ok {
		if pct, err := strconv.Atoi(p); err == nil {
			limit = n * pct / 100
		}
	} else if i, err := strconv.Atoi(v); err == nil {
		limit = i
	}
	return max(limit, 1)
}

func maxConcurrent(g *deckhousev1.NodeGroup, n int) int {
	if g.Spec.Update == nil || g.Spec.Update.MaxConcurrent == nil {
		return 1
	}
	return MaxConcurrent(g.Spec.Update.MaxConcurrent.String(), n)
}

func windows(g *deckhousev1.NodeGroup) []deckhousev1.DisruptionWindow {
	d := g.Spec.Disruptions
	switch {
	case d == nil:
		return nil
	case nodes.Mode(g) == deckhousev1.ApprovalRollingUpdate && d.RollingUpdate != nil:
		return d.RollingUpdate.Windows
	case nodes.Mode(g) == deckhousev1.ApprovalAutomatic && d.Automatic != nil:
		return d.Automatic.Windows
	}
	return nil
}

func drainBeforeApproval(g *deckhousev1.NodeGroup) bool {
	d := g.Spec.Disruptions
	if d == nil || d.Automatic == nil || d.Automatic.DrainBeforeApproval == nil {
		return true
	}
	return *d.Automatic.DrainBeforeApproval
}

// Plan decides, for one group, in three passes over one consistent view:
//  1. nodes that applied the group's checksum and are Ready lose the
//     protocol annotations (and are uncordoned if we drained them);
//  2. approved nodes asking for a disruption get it as the mode allows,
//     while fewer than maxConcurrent are disrupted;
//  3. waiting nodes are approved while fewer than maxConcurrent are.
//
// Each pass sees the changes of the ones before it.
func Plan(in Input) Decision {
	d := Decision{Changes: map[string]*nodes.Change{}}
	if in.Checksum == "" || in.Group == nil {
		return d
	}
	view := make([]*corev1.Node, 0, len(in.Nodes))
	for _, n := range in.Nodes {
		view = append(view, n.DeepCopy())
	}
	slices.SortFunc(view, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	apply := func(n *corev1.Node, c *nodes.Change) {
		c.ApplyTo(n)
		d.change(n.Name).Merge(c)
	}
	var gt *gate
	if Gated(in.Group) {
		gt = openGate(in, view)
	}

	// 1. Finished updates. A node can also finish while a drain we asked
	// for is still running (its configuration changed to one that needs no
	// disruption): that drain is called off, and its cordon lifted.
	for _, n := range view {
		ours := nodes.DrainedByUs(n) || nodes.DrainingByUs(n)
		// A disruption approved by a person for a node without an update
		// approval ends here too: it would hold a disruption slot forever.
		inUpdate := nodes.Has(n, deckhousev1.ApprovedAnnotation) || ours || nodes.Has(n, deckhousev1.DisruptionApprovedAnnotation)
		if !inUpdate || n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != in.Checksum || !nodes.IsReady(n) {
			continue
		}
		c := (&nodes.Change{}).Remove(n, deckhousev1.ApprovedAnnotation, deckhousev1.WaitingForApprovalAnnotation, deckhousev1.DisruptionRequiredAnnotation,
			deckhousev1.DisruptionApprovedAnnotation, deckhousev1.DrainedAnnotation, deckhousev1.DrainFailedAnnotation, deckhousev1.RollingUpdateAnnotation, deckhousev1.ReplacementReportedAnnotation,
			deckhousev1.ForeignCordonAnnotation)
		if nodes.DrainingByUs(n) {
			c.Remove(n, deckhousev1.DrainingAnnotation)
		}
		uncordon(n, c, ours)
		apply(n, c)
		d.Events = append(d.Events, Event{n.Name, corev1.EventTypeNormal, "UpdateFinished",
			fmt.Sprintf("configuration %.12s is applied", in.Checksum)})
	}

	// 2. Disruptions, bounded like approvals: at most maxConcurrent nodes
	// are disrupted at once, and only nodes that hold an update approval
	// are granted one.
	limit := maxConcurrent(in.Group, len(view))
	// slot reports whether n may be disrupted: it is already, or fewer
	// than limit nodes are. Every grant is applied to the view at once, so
	// the count always includes the grants of this pass.
	slot := func(n *corev1.Node) bool {
		if Disrupted(n) {
			return true
		}
		c := 0
		for _, o := range view {
			if Disrupted(o) {
				c++
			}
		}
		return c < limit
	}
	mode := nodes.Mode(in.Group)
	// available: Ready, schedulable and not being drained — where pods go.
	available := func(except *corev1.Node) int {
		c := 0
		for _, o := range view {
			if o != except && nodes.IsReady(o) && !o.Spec.Unschedulable && !nodes.Has(o, deckhousev1.DrainingAnnotation) {
				c++
			}
		}
		return c
	}
	for _, n := range view {
		if mode != deckhousev1.ApprovalRollingUpdate && nodes.Has(n, deckhousev1.RollingUpdateAnnotation) {
			// Left from a time the group was in RollingUpdate mode: the
			// node now asks for a disruption the current mode's way.
			apply(n, (&nodes.Change{}).Remove(n, deckhousev1.RollingUpdateAnnotation, deckhousev1.ReplacementReportedAnnotation))
		}
		wantsDisruption := nodes.Has(n, deckhousev1.DisruptionRequiredAnnotation) && !nodes.Has(n, deckhousev1.DisruptionApprovedAnnotation)
		wantsReplacement := nodes.Has(n, deckhousev1.RollingUpdateAnnotation)
		if !wantsDisruption && !wantsReplacement {
			continue
		}
		if mode == deckhousev1.ApprovalManual {
			continue // a person approves: never automatic
		}
		if !InWindow(windows(in.Group), in.Now) {
			d.recheck(NextOpening(windows(in.Group), in.Now))
			if wantsDisruption && (nodes.DrainingByUs(n) || nodes.DrainedByUs(n)) {
				// The window closed before the disruption was approved:
				// draining is a disruption too, so it is called off and the
				// node takes pods again until the next window.
				c := (&nodes.Change{}).Remove(n, deckhousev1.DrainingAnnotation, deckhousev1.DrainedAnnotation, deckhousev1.DrainFailedAnnotation, deckhousev1.ForeignCordonAnnotation)
				uncordon(n, c, true)
				apply(n, c)
				d.Events = append(d.Events, Event{n.Name, corev1.EventTypeNormal, "DrainCalledOff",
					"the disruption window closed before the disruption was approved; the node is uncordoned (unless someone else had cordoned it) and drained again in the next window"})
			}
			continue
		}
		if wantsDisruption && mode == deckhousev1.ApprovalAutomatic {
			d.recheck(ClosesAt(windows(in.Group), in.Now))
		}
		// A node without an update approval (it asked for both at once, or
		// its approval was taken back) waits for one: approvals are what
		// maxConcurrent hands out, and a disruption is part of an update.
		// Any change of the group's nodes looks again.
		approved := nodes.Has(n, deckhousev1.ApprovedAnnotation)
		if mode == deckhousev1.ApprovalRollingUpdate {
			if !nodes.Has(n, deckhousev1.RollingUpdateAnnotation) {
				if !approved || !slot(n) {
					continue
				}
				apply(n, (&nodes.Change{}).Set(deckhousev1.RollingUpdateAnnotation, ""))
			}
			if _, managed := n.Annotations[deckhousev1.MachineAnnotation]; !managed && !nodes.Has(n, deckhousev1.ReplacementReportedAnnotation) {
				apply(n, (&nodes.Change{}).Set(deckhousev1.ReplacementReportedAnnotation, ""))
				d.Events = append(d.Events, Event{n.Name, corev1.EventTypeWarning, "ReplacementNeeded",
					"the group's approvalMode is RollingUpdate, but no machine controller manages this node: replace it by hand, or set approvalMode to Automatic or Manual"})
			}
			continue
		}
		// Automatic.
		if !approved {
			continue
		}
		approve := func(why string) {
			if !slot(n) {
				return
			}
			apply(n, (&nodes.Change{}).Set(deckhousev1.DisruptionApprovedAnnotation, "").Remove(n, deckhousev1.DisruptionRequiredAnnotation))
			d.Events = append(d.Events, Event{n.Name, corev1.EventTypeNormal, "DisruptionApproved", "disruption approved: " + why})
		}
		switch {
		case !drainBeforeApproval(in.Group):
			approve("drainBeforeApproval is off")
		case in.Group.Name == deckhousev1.MasterNodeGroup && len(view) == 1:
			approve("the only master node is not drained")
		case n.Name == in.ControllerNode && ready(view) < 2:
			approve("the node runs node-manager-controller and is its group's only Ready node, so it is not drained")
		case nodes.Has(n, deckhousev1.DrainedAnnotation):
			approve("the node is drained")
		case nodes.Has(n, deckhousev1.DrainingAnnotation):
			// The drain is under way (or failed and being retried).
		case len(view) > 1 && available(n) == 0:
			// Draining the last node of the group pods can run on would
			// leave them nowhere: wait until another node of the group is
			// Ready and schedulable (any node change looks again). A
			// group's only node is drained: its pods go to other groups'
			// nodes, or wait for it, as with Deckhouse.
		case !slot(n):
			// maxConcurrent nodes are disrupted: wait for one to finish.
		default:
			c := (&nodes.Change{}).Set(deckhousev1.DrainingAnnotation, deckhousev1.DrainSourceBashible)
			msg := "draining before the disruptive update"
			if n.Spec.Unschedulable {
				// Someone else's cordon: it outlives the update.
				c.Set(deckhousev1.ForeignCordonAnnotation, "")
				msg += "; the node was cordoned by someone else and stays cordoned afterwards"
			}
			apply(n, c)
			d.Events = append(d.Events, Event{n.Name, corev1.EventTypeNormal, "DrainRequested", msg})
		}
	}

	// 3. Update approvals; in a Gated group, in batches (canary.go).
	room := limit
	if gt != nil {
		gt.settle(view, in.Now, &d)
		room = gt.room(limit)
	}
	approved := 0
	var waiting []*corev1.Node
	allReady := true
	for _, n := range view {
		if nodes.Has(n, deckhousev1.ApprovedAnnotation) {
			approved++
		} else if nodes.Has(n, deckhousev1.WaitingForApprovalAnnotation) {
			waiting = append(waiting, n)
		}
		allReady = allReady && nodes.IsReady(n)
	}
	// Disrupted nodes go first, beyond the limit and whatever the group's
	// health: someone (a person) already took them out of service, and
	// only their update frees the disruption slot they hold — waiting
	// would deadlock against an approved node waiting for that slot. Then
	// nodes that are not Ready: they cannot get worse, and their update may
	// be what mends them. While the group is not healthy only they are
	// approved.
	rank := func(n *corev1.Node) int {
		switch {
		case Disrupted(n):
			return 0
		case !nodes.IsReady(n):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(waiting, func(a, b *corev1.Node) int { return rank(a) - rank(b) })
	for _, n := range waiting {
		if rank(n) > 0 && (approved >= limit || room <= 0) {
			break
		}
		if rank(n) > 1 && !allReady {
			break
		}
		if gt != nil && gt.r.Halt != nil {
			break // a halted rollout approves nobody, disrupted nodes included
		}
		apply(n, (&nodes.Change{}).Set(deckhousev1.ApprovedAnnotation, "").Remove(n, deckhousev1.WaitingForApprovalAnnotation))
		approved++
		if rank(n) > 0 {
			room--
		}
		if gt != nil {
			// A disrupted node goes outside the batch limit, but in the
			// batch: it is watched and soaked like the others.
			gt.admit(n.Name, in.Now)
		}
		d.Events = append(d.Events, Event{n.Name, corev1.EventTypeNormal, "UpdateApproved",
			fmt.Sprintf("update to configuration %.12s approved (%d of at most %d at a time)", in.Checksum, approved, limit)})
	}

	for name, c := range d.Changes {
		if c.Empty() {
			delete(d.Changes, name)
		}
	}
	if gt != nil {
		r := gt.r
		d.Rollout, d.Halted, d.Resumed = &r, gt.halted, gt.resumed
	}
	return d
}

// uncordon lifts the node's cordon when it is ours: the node was drained
// for the update (ours) and it was not already cordoned by someone else
// when the drain was asked for.
func uncordon(n *corev1.Node, c *nodes.Change, ours bool) {
	if ours && n.Spec.Unschedulable && !nodes.Has(n, deckhousev1.ForeignCordonAnnotation) {
		c.SetUnschedulable(false)
	}
}

func ready(view []*corev1.Node) int {
	r := 0
	for _, n := range view {
		if nodes.IsReady(n) {
			r++
		}
	}
	return r
}

// Disrupted reports whether the node counts as disrupted for an update: from
// the moment node-manager asks to drain it until it reports the group's
// checksum again. That is: node-manager drains it or has drained it
// (draining or drained with the value bashible), its disruption is approved
// (by node-manager or a person), or it is marked for replacement
// (rolling-update). A drain a person or another tool started is theirs and
// not counted; a node on its first run passes bb-disruption-gate without
// asking, has no workloads yet, and is not counted either.
func Disrupted(n *corev1.Node) bool {
	return nodes.DrainingByUs(n) || nodes.DrainedByUs(n) || nodes.Has(n, deckhousev1.DisruptionApprovedAnnotation) || nodes.Has(n, deckhousev1.RollingUpdateAnnotation)
}
