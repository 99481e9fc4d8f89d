package approval

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/drain"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// simNode is one node's agent in the simulation: it follows bashible's
// side of the protocol (templates/tree: bashible.sh and the library's
// bb-wait-for-update-approval and bb-disruption-gate), one small step at a
// time — and may ask for a disruption together with its update approval,
// which the controller must not grant before the approval.
type simNode struct {
	node       *corev1.Node
	disruptive bool // whether applying the current target needs a disruption
	target     string
	// again: the machine rebooted, and a step asks for a disruption on
	// every boot, so the node converges its configuration once more
	// through update approval and a disruption (bashible.sh: a reboot
	// request, or bb-disruption-gate on a node that holds no approval).
	again bool
	// failing: its bashible run fails (reported on its Instance) until fixed.
	failing bool
}

// world is a group under rollout: the nodes, the drain controller's
// in-flight drains, a clock, and the invariant checks.
type world struct {
	t      *testing.T
	rng    *rand.Rand
	group  *deckhousev1.NodeGroup
	sum    string
	nodes  []*simNode
	now    time.Time
	drains map[string]int // node -> steps the drain has been running (controller memory)
	step   int
	// blocked makes every drain fail, like a PodDisruptionBudget that
	// forbids eviction.
	blocked bool
	// everyRun: every node asks for a disruption on every run (a step that
	// reboots on every boot), and machines reboot often.
	everyRun bool
	// controllerNode is where node-manager-controller runs, if in the group.
	controllerNode string
	// record is the group's RolloutStateAnnotation (a gated group's), kept
	// as the cluster keeps it: encoded between decisions.
	record string
	// instances are where the agents report a failed bashible run.
	instances map[string]*deckhousev1alpha1.Instance
	// resume: a person sets the resume annotation before the next decision.
	resume bool
	// halts and soaks count what the gated rollouts went through; lost
	// counts the approvals whose write was lost.
	halts, soaks, lost *int
}

func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("step %d (group %s, maxConcurrent %v, mode %s): %s", w.step, w.group.Name,
		w.group.Spec.Update.MaxConcurrent, nodes.Mode(w.group), fmt.Sprintf(format, args...))
}

func (w *world) approved() int {
	c := 0
	for _, n := range w.nodes {
		if nodes.Has(n.node, deckhousev1.ApprovedAnnotation) {
			c++
		}
	}
	return c
}

// controller runs one Plan over the current state and checks what it did.
func (w *world) controller() {
	in := Input{Group: w.group, Checksum: w.sum, Now: w.now, ControllerNode: w.controllerNode, Instances: w.instances, Resume: w.resume}
	for _, n := range w.nodes {
		in.Nodes = append(in.Nodes, n.node)
	}
	in.Rollout = ParseRollout(&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{deckhousev1.RolloutStateAnnotation: w.record}}})
	before := w.approved()
	d := Plan(in)
	w.checkGate(in, d)
	w.resume = false
	limit := MaxConcurrent(w.group.Spec.Update.MaxConcurrent.String(), len(w.nodes))
	grantedApproval, grantedDisruption, beyond := false, false, 0
	for _, n := range w.nodes {
		c := d.Changes[n.node.Name]
		if c == nil {
			continue
		}
		if v, ok := c.Annotations[deckhousev1.ApprovedAnnotation]; ok && v != nil {
			if Disrupted(n.node) {
				// Out of service already (a person disrupted it): approved
				// beyond the limit so that its slot is freed.
				before--
				beyond++
			} else {
				grantedApproval = true
			}
		}
		if grants := disruptionGrants(n.node, c); len(grants) > 0 {
			// A node disrupted already holds its slot; a new one takes one.
			grantedDisruption = grantedDisruption || !Disrupted(n.node)
			if !nodes.Has(n.node, deckhousev1.ApprovedAnnotation) {
				w.fail("node %s: %v granted to a node without an update approval (annotations %v)", n.node.Name, grants, n.node.Annotations)
			}
		}
		if v, ok := c.Annotations[deckhousev1.DisruptionApprovedAnnotation]; ok && v != nil {
			if nodes.Mode(w.group) == deckhousev1.ApprovalManual {
				w.fail("node %s: disruption approved automatically in Manual mode", n.node.Name)
			}
			if !InWindow(windows(w.group), w.now) {
				w.fail("node %s: disruption approved outside the windows at %s", n.node.Name, w.now.Format("Mon 15:04"))
			}
			if drainBeforeApproval(w.group) && !nodes.Has(n.node, deckhousev1.DrainedAnnotation) && !w.spared(n.node) {
				w.fail("node %s: disruption approved without a finished drain (annotations %v)", n.node.Name, n.node.Annotations)
			}
		}
		if v, ok := c.Annotations[deckhousev1.ApprovedAnnotation]; ok && v != nil && w.rng.IntN(8) == 0 {
			// The approval's write conflicted (the node changed under it)
			// after the record was written: the batch names a node that
			// was not approved.
			*w.lost++
			continue
		}
		c.ApplyTo(n.node)
	}
	// A drain we asked for always leaves another node of the group for the
	// pods, unless the node is the group's only one.
	for _, n := range w.nodes {
		if c := d.Changes[n.node.Name]; c == nil || c.Annotations[deckhousev1.DrainingAnnotation] == nil || len(w.nodes) == 1 {
			continue
		}
		others := 0
		for _, o := range w.nodes {
			if o != n && nodes.IsReady(o.node) && !o.node.Spec.Unschedulable && !nodes.Has(o.node, deckhousev1.DrainingAnnotation) {
				others++
			}
		}
		if others == 0 {
			w.fail("node %s: drain asked for with no other Ready, schedulable node in the group", n.node.Name)
		}
	}
	// Draining is a disruption too: none of ours runs outside the windows.
	if nodes.Mode(w.group) == deckhousev1.ApprovalAutomatic && !InWindow(windows(w.group), w.now) {
		for _, n := range w.nodes {
			if nodes.DrainingByUs(n.node) && nodes.Has(n.node, deckhousev1.DisruptionRequiredAnnotation) {
				w.fail("node %s is being drained outside the disruption windows (%s)", n.node.Name, w.now.Format("Mon 15:04"))
			}
		}
	}
	if after := w.approved() - beyond; grantedApproval && after > limit {
		w.fail("approved %d nodes (was %d) with maxConcurrent %d", after, before, limit)
	}
	if grantedDisruption {
		var disrupted []string
		for _, n := range w.nodes {
			if Disrupted(n.node) {
				disrupted = append(disrupted, n.node.Name)
			}
		}
		if len(disrupted) > limit {
			w.fail("%d nodes disrupted at once %v with maxConcurrent %d (changes %v)", len(disrupted), disrupted, limit, d.Changes)
		}
	}
}

// checkGate checks a gated group's decision: a halted or soaking rollout
// approves nobody (but nodes out of service already); a batch holds at
// most its canaries, then maxConcurrent, nodes; every approved node but a
// failed one a person let pass is in the batch. It keeps the record.
func (w *world) checkGate(in Input, d Decision) {
	if !Gated(w.group) {
		if d.Rollout != nil {
			w.fail("a group without canaries or soak keeps a record")
		}
		return
	}
	if d.Rollout == nil {
		w.fail("a gated group's decision keeps no record")
	}
	r := *d.Rollout
	was := in.Rollout
	granted := 0
	for _, n := range in.Nodes {
		if c := d.Changes[n.Name]; c != nil && c.Annotations[deckhousev1.ApprovedAnnotation] != nil && !Disrupted(n) {
			granted++
		}
	}
	sameRollout := was.Checksum == in.Checksum
	if granted > 0 && sameRollout && was.Halt != nil && !in.Resume {
		w.fail("approved %d nodes while the rollout is halted by %s", granted, was.Halt.Node)
	}
	if granted > 0 && r.Halt != nil {
		w.fail("approved %d nodes in the decision that halted the rollout", granted)
	}
	if granted > 0 && sameRollout && was.SoakUntil != nil && w.now.Before(was.SoakUntil.Time) {
		w.fail("approved %d nodes while the batch soaks until %s (now %s)", granted, was.SoakUntil.Time, w.now)
	}
	limit := MaxConcurrent(w.group.Spec.Update.MaxConcurrent.String(), len(in.Nodes))
	if c := Canaries(w.group); len(r.Canaries) < c {
		limit = min(limit, c-len(r.Canaries))
	}
	inBatch := 0
	for _, n := range in.Nodes {
		if c := d.Changes[n.Name]; c != nil && c.Annotations[deckhousev1.ApprovedAnnotation] != nil {
			if !Disrupted(n) {
				inBatch++
			}
			if !slices.Contains(r.Batch, n.Name) {
				w.fail("node %s approved outside the recorded batch %v", n.Name, r.Batch)
			}
		}
	}
	if granted > 0 && inBatch > limit {
		w.fail("a batch of %d nodes %v; at most %d", inBatch, r.Batch, limit)
	}
	// A batch filled again after a lost approval holds no more nodes than
	// its size either (nodes out of service already aside).
	if granted > 0 {
		members := 0
		for _, n := range in.Nodes {
			if slices.Contains(r.Batch, n.Name) && !Disrupted(n) {
				members++
			}
		}
		if members > limit {
			w.fail("a batch of %d nodes %v after filling it again; at most %d", members, r.Batch, limit)
		}
	}
	if d.Halted != nil {
		*w.halts++
	}
	if r.SoakUntil != nil && was.SoakUntil == nil {
		*w.soaks++
	}
	w.record = r.Encode()
}

// disruptionGrants lists what of a disruption the change grants the node:
// a drain by node-manager, a disruption approval, a replacement mark.
func disruptionGrants(n *corev1.Node, c *nodes.Change) []string {
	var out []string
	for _, k := range []string{deckhousev1.DrainingAnnotation, deckhousev1.DisruptionApprovedAnnotation, deckhousev1.RollingUpdateAnnotation} {
		if v, ok := c.Annotations[k]; ok && v != nil && !nodes.Has(n, k) {
			out = append(out, k)
		}
	}
	return out
}

// drainer plays the drain controller: a drain takes a few steps and then
// succeeds, unless blocked, in which case it fails and keeps retrying.
func (w *world) drainer() {
	for _, n := range w.nodes {
		if !nodes.Has(n.node, deckhousev1.DrainingAnnotation) {
			delete(w.drains, n.node.Name)
			continue
		}
		drain.Cordon(n.node).ApplyTo(n.node)
		w.drains[n.node.Name]++
		switch {
		case w.blocked || w.rng.IntN(10) == 0:
			drain.Failed(n.node, "evicting pod default/web-0: Cannot evict pod as it would violate the pod's disruption budget").ApplyTo(n.node)
		case w.drains[n.node.Name] >= 2:
			drain.Succeeded(n.node).ApplyTo(n.node)
			delete(w.drains, n.node.Name)
		}
		if nodes.Has(n.node, deckhousev1.DrainedAnnotation) && nodes.Has(n.node, deckhousev1.DrainFailedAnnotation) {
			w.fail("node %s is both drained and drain-failed", n.node.Name)
		}
	}
}

// agents play bashible on every Ready node.
func (w *world) agents() {
	for _, n := range w.nodes {
		if !nodes.IsReady(n.node) && w.rng.IntN(3) != 0 {
			continue // a NotReady node's bashible often cannot run at all
		}
		a := n.node.Annotations
		if n.target != w.sum {
			n.target, n.disruptive = w.sum, w.everyRun || w.rng.IntN(3) == 0
		}
		if n.again && a[deckhousev1.ConfigurationChecksumAnnotation] == n.target && !nodes.HasUpdateAnnotation(n.node) {
			// A converge of the configuration the node has, that will
			// disrupt: it is an update like any other.
			n.again, n.disruptive = false, true
			delete(a, deckhousev1.ConfigurationChecksumAnnotation)
		}
		if a[deckhousev1.ConfigurationChecksumAnnotation] == n.target && !nodes.Has(n.node, deckhousev1.ApprovedAnnotation) {
			continue // in sync
		}
		switch {
		case !nodes.Has(n.node, deckhousev1.ApprovedAnnotation) && !nodes.Has(n.node, deckhousev1.WaitingForApprovalAnnotation):
			a[deckhousev1.WaitingForApprovalAnnotation] = ""
			delete(a, deckhousev1.ConfigurationChecksumAnnotation)
			if n.disruptive && nodes.Mode(w.group) != deckhousev1.ApprovalRollingUpdate && w.rng.IntN(2) == 0 {
				// A node may ask for both at once; the disruption must
				// still wait for the update approval.
				a[deckhousev1.DisruptionRequiredAnnotation] = ""
			}
		case !nodes.Has(n.node, deckhousev1.ApprovedAnnotation):
			// waiting
		case a[deckhousev1.ConfigurationChecksumAnnotation] == n.target:
			// applied; waiting for node-manager to clean up
		case n.disruptive && !nodes.Has(n.node, deckhousev1.DisruptionApprovedAnnotation):
			if nodes.Mode(w.group) == deckhousev1.ApprovalRollingUpdate {
				a[deckhousev1.RollingUpdateAnnotation] = ""
			} else {
				a[deckhousev1.DisruptionRequiredAnnotation] = ""
			}
		case n.failing:
			// bashible fails a step and retries: approved, never applying.
			if w.instances[n.node.Name] == nil {
				w.instances[n.node.Name] = failed(n.node.Name, "step 050_x failed with exit status 1 after 0s (attempt 1 of 3)", w.now)
			}
		default:
			a[deckhousev1.ConfigurationChecksumAnnotation] = n.target
			delete(w.instances, n.node.Name)
		}
	}
}

// machines plays a machine controller for RollingUpdate groups: a node
// marked for replacement is replaced by a fresh one with the current
// configuration.
func (w *world) machines() {
	for i, n := range w.nodes {
		if nodes.Has(n.node, deckhousev1.RollingUpdateAnnotation) && w.rng.IntN(2) == 0 {
			fresh := node(fmt.Sprintf("%s-r%d", n.node.Name, w.step), true, deckhousev1.ConfigurationChecksumAnnotation, w.sum, deckhousev1.MachineAnnotation, "m")
			w.nodes[i] = &simNode{node: fresh, target: w.sum}
		}
	}
}

func (w *world) chaos() {
	r := w.rng.IntN(100)
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	switch {
	case r < 5: // a node fails or recovers
		ready := !nodes.IsReady(n.node)
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		n.node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	case r < 8: // a person approves an update by hand
		if nodes.Has(n.node, deckhousev1.WaitingForApprovalAnnotation) {
			n.node.Annotations[deckhousev1.ApprovedAnnotation] = ""
		}
	case r < 10: // the controller restarts: in-flight drains are forgotten
		w.drains = map[string]int{}
	case r < 11: // a new configuration
		w.sum = fmt.Sprintf("sum-%d", w.step)
	case r < 16: // time passes
		w.now = w.now.Add(time.Duration(w.rng.IntN(240)) * time.Minute)
	case r < 17: // a person changes the group's disruption mode
		g := randomGroup(w.rng, 0)
		w.group.Spec.Disruptions = g.Spec.Disruptions
	case r < 19: // a step starts or stops failing on a node
		n.failing = !n.failing
		delete(w.instances, n.node.Name)
	case r < 20: // a person resumes the rollout
		w.resume = true
	case r < 21: // the record is lost (written by hand, restored from a backup)
		w.record = ""
	case r < 30 && w.everyRun: // a machine reboots; its steps ask for a disruption again
		n.again = true
	}
	if nodes.Mode(w.group) == deckhousev1.ApprovalManual && w.rng.IntN(10) == 0 {
		// a person drains and approves a disruption
		for _, n := range w.nodes {
			if nodes.Has(n.node, deckhousev1.DisruptionRequiredAnnotation) {
				n.node.Annotations[deckhousev1.DisruptionApprovedAnnotation] = ""
				delete(n.node.Annotations, deckhousev1.DisruptionRequiredAnnotation)
				break
			}
		}
	}
}

func randomGroup(rng *rand.Rand, i int) *deckhousev1.NodeGroup {
	maxes := []intstr.IntOrString{intstr.FromInt32(1), intstr.FromInt32(2), intstr.FromString("40%"), intstr.FromString("100%")}
	g := group(fmt.Sprintf("g%d", i), maxc(maxes[rng.IntN(len(maxes))]))
	var w []deckhousev1.DisruptionWindow
	if rng.IntN(2) == 0 {
		w = []deckhousev1.DisruptionWindow{{From: "01:00", To: "05:00"}, {From: "13:00", To: "14:00", Days: []deckhousev1.Weekday{"Sat", "Sun"}}}
	}
	switch rng.IntN(4) {
	case 0:
		mode(deckhousev1.ApprovalManual, nil)(g)
	case 1:
		mode(deckhousev1.ApprovalAutomatic, ptr.To(false), w...)(g)
	case 2:
		mode(deckhousev1.ApprovalRollingUpdate, nil, w...)(g)
	default:
		mode(deckhousev1.ApprovalAutomatic, nil, w...)(g)
	}
	if rng.IntN(5) == 0 {
		g.Name = "master"
	}
	if rng.IntN(3) == 0 {
		g.Spec.Update.Canaries = ptr.To(int32(rng.IntN(3)))
		if rng.IntN(2) == 0 {
			g.Spec.Update.SoakTime = &metav1.Duration{Duration: time.Duration(1+rng.IntN(30)) * time.Minute}
		}
	}
	return g
}

// TestSimulatedRollouts runs randomized rollouts (an eighth of the
// approvals written are lost, as a conflicting write is) and checks the safety
// invariants after every controller pass: never more approved than
// maxConcurrent by the controller, never more disrupted than maxConcurrent
// after the controller granted a disruption, never a disruption granted to
// a node without an update approval, never drained after a failed drain,
// never a disruption approved in Manual mode, outside a window, or without a
// finished drain where one is required. A third of the rollouts have every
// node ask for a disruption on every run, with machines rebooting often. Then, with failures stopped, every
// rollout must finish: all nodes on the group's checksum, no protocol
// annotations left, nothing cordoned.
func TestSimulatedRollouts(t *testing.T) {
	const rollouts = 300
	gated, halts, soaks, lost := 0, 0, 0, 0
	for i := range rollouts {
		seed := uint64(i)
		rng := rand.New(rand.NewPCG(seed, 42))
		w := &world{t: t, rng: rng, group: randomGroup(rng, i), sum: "sum-0", drains: map[string]int{}, instances: map[string]*deckhousev1alpha1.Instance{}, halts: &halts, soaks: &soaks, lost: &lost,
			now: time.Date(2026, 11, 16, rng.IntN(24), 0, 0, 0, time.UTC)}
		for j := range 1 + rng.IntN(7) {
			w.nodes = append(w.nodes, &simNode{node: node(fmt.Sprintf("n%d", j), true, deckhousev1.ConfigurationChecksumAnnotation, "initial", deckhousev1.MachineAnnotation, "m")})
		}
		w.blocked = rng.IntN(5) == 0
		if rng.IntN(4) == 0 {
			w.controllerNode = "n0"
		}
		w.everyRun = i%3 == 0
		if Gated(w.group) {
			gated++
		}
		for w.step = 0; w.step < 150; w.step++ {
			w.chaos()
			w.agents()
			w.controller()
			w.drainer()
			w.machines()
		}
		// Calm: every node Ready, drains can succeed, time inside windows,
		// a person approves manual disruptions.
		w.blocked = false
		for _, n := range w.nodes {
			n.again, n.failing = false, false
			n.node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		}
		for ; w.step < 400 && !w.done(); w.step++ {
			if !InWindow(windows(w.group), w.now) {
				w.now = NextOpening(windows(w.group), w.now)
			}
			// A person resumes a halted rollout; soaks end.
			if r := ParseRollout(&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{deckhousev1.RolloutStateAnnotation: w.record}}}); r.Halt != nil {
				w.resume = true
			} else if r.SoakUntil != nil && w.now.Before(r.SoakUntil.Time) {
				w.now = r.SoakUntil.Time
			}
			if nodes.Mode(w.group) == deckhousev1.ApprovalManual {
				for _, n := range w.nodes {
					if nodes.Has(n.node, deckhousev1.DisruptionRequiredAnnotation) {
						n.node.Annotations[deckhousev1.DisruptionApprovedAnnotation] = ""
						delete(n.node.Annotations, deckhousev1.DisruptionRequiredAnnotation)
					}
				}
			}
			w.agents()
			w.controller()
			w.drainer()
			w.machines()
		}
		if !w.done() {
			var states []string
			for _, n := range w.nodes {
				states = append(states, fmt.Sprintf("%s=%s%v", n.node.Name, nodes.State(n.node, w.group, w.sum), n.node.Annotations))
			}
			slices.Sort(states)
			w.fail("the rollout did not finish (seed %d): %v", seed, states)
		}
	}
	if halts == 0 || soaks == 0 || lost == 0 {
		t.Errorf("the %d gated rollouts never halted (%d), soaked (%d) or lost an approval (%d): the simulation does not test the gate", gated, halts, soaks, lost)
	}
	t.Logf("%d randomized rollouts (%d with canaries or a soak time: %d halts, %d soaks; %d approvals lost) finished with every invariant held", rollouts, gated, halts, soaks, lost)
}

// spared reports whether Deckhouse approves n's disruption without a
// drain: the only master, or the controller's node while it is its group's
// only Ready node.
func (w *world) spared(n *corev1.Node) bool {
	if w.group.Name == deckhousev1.MasterNodeGroup && len(w.nodes) == 1 {
		return true
	}
	ready := 0
	for _, o := range w.nodes {
		if nodes.IsReady(o.node) {
			ready++
		}
	}
	return n.Name == w.controllerNode && ready < 2
}

func (w *world) done() bool {
	for _, n := range w.nodes {
		if n.node.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != w.sum || nodes.HasUpdateAnnotation(n.node) || n.node.Spec.Unschedulable {
			return false
		}
	}
	return true
}
