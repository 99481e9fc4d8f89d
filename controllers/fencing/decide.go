package fencing

import (
	"fmt"
	"slices"
	"strings"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Timing is what a group's evacuation delay is checked against: the
// controller's margin, and the agents' and the kubelet's intervals (see
// the inequality in apiserver/apis/deckhouse/v1/fencing_timing.go).
type Timing struct {
	// Margin is added to a group's watchdog timeout: the evacuation delay.
	Margin time.Duration
	// AgentAPITimeout and AgentFeedInterval are the fencing agents'
	// --api-timeout and --feed-interval.
	AgentAPITimeout, AgentFeedInterval time.Duration
	// LeaseRenewInterval is how often a kubelet renews its node's Lease.
	LeaseRenewInterval time.Duration
}

// Limits are the blast-radius cap and the outage guard.
type Limits struct {
	// Interval is the cap's sliding window: at most MaxNodes, or MaxPercent
	// of a group's nodes if that is more, are fenced in any Interval.
	Interval   time.Duration
	MaxNodes   int
	MaxPercent int
	// OutagePercent and OutageMinNodes: when at least OutageMinNodes of the
	// candidates (labelled nodes of fenced groups, not in maintenance, not
	// fenced already) are silent (have missed two Lease renewals), and they
	// are more than OutagePercent of them, nobody is fenced: so many nodes
	// do not die at once; the control plane, or the network to it, failed.
	OutagePercent  int
	OutageMinNodes int
	// APIViewTimeout: when the controller has not seen any node's Lease
	// renewed for longer than this, its own view of the API is stale (its
	// watch is broken, or the API is), and nobody is fenced.
	APIViewTimeout time.Duration
}

// Node is what the decision knows of one Node labelled fencing-enabled.
type Node struct {
	Name, Group string
	// Type is the node's node.deckhouse.io/type (else its group's nodeType).
	Type deckhousev1.NodeType
	// Notify: the node's fencing-mode label (or its group's mode) is Notify.
	Notify bool
	// Maintenance is the maintenance annotation the node carries, "" if none.
	Maintenance string
	// HasLease: the node's Lease exists; LastRenewal is when it was last
	// renewed as far as the controller can tell (the later of its
	// spec.renewTime and when the controller saw that renewal).
	HasLease    bool
	LastRenewal time.Time
	// Fenced: the node was fenced already at this renewal, and its Node kept.
	Fenced bool
	// HeldUntil is the last time a guard under which the node's agent may
	// have kept feeding its watchdog held the node (the group's majority
	// silent, or the cluster's): its watchdog can only have started when
	// the hold ended, so the node is dead only a full evacuation delay
	// after that, whatever its Lease says. A partition that heals node by
	// node would otherwise free the pods of a node still feeding.
	HeldUntil time.Time
}

// Group is what the decision knows of one NodeGroup.
type Group struct {
	Name string
	// Fencing is the group's spec.fencing; nil when it has none.
	Fencing  *deckhousev1.FencingSpec
	NodeType deckhousev1.NodeType
	// Size is how many Nodes the group has (fenced or not).
	Size int
	// Recent are the nodes of the group fenced within the last
	// Limits.Interval, and when.
	Recent map[string]time.Time
}

// Facts are the inputs of one decision.
type Facts struct {
	Now    time.Time
	Nodes  []Node
	Groups map[string]Group
	// LastRenewalSeen is the latest time the controller saw any node's
	// Lease renewed (labelled or not): the freshness of its own view.
	LastRenewalSeen time.Time
	Timing          Timing
	Limits          Limits
}

// Verdict is what happens to a dead node.
type Verdict int

const (
	// Fence: force-delete its pods, then delete its Node unless KeepNode.
	Fence Verdict = iota
	// Skip: leave it; Reason says why.
	Skip
)

// The reasons of decisions: the reason of the Events on Nodes and groups,
// of the FencingHeld condition, and the reason label of the metrics. A
// fixed list, so the metrics' labels stay bounded.
const (
	// ReasonFenced: the node was dead and was fenced.
	ReasonFenced = "NodeFenced"
	// ReasonMaintenance: the node carries a maintenance annotation.
	ReasonMaintenance = "Maintenance"
	// ReasonNoLease: the node has no Lease, so whether it is alive is unknown.
	ReasonNoLease = "NoLease"
	// ReasonGroupNotFenced: the node's group does not exist or has no
	// spec.fencing, so its watchdog timeout is unknown.
	ReasonGroupNotFenced = "GroupNotFenced"
	// ReasonUnsafeTiming: the group's timing breaks the inequality.
	ReasonUnsafeTiming = "UnsafeTiming"
	// ReasonStaleAPIView: the controller's view of the API is stale.
	ReasonStaleAPIView = "StaleAPIView"
	// ReasonClusterOutage: too many nodes are dead at once.
	ReasonClusterOutage = "ClusterOutage"
	// ReasonGroupQuorumLost: a majority of the group stopped renewing at
	// once: it may be alive and cut off from the control plane, where its
	// agents keep their watchdogs fed.
	ReasonGroupQuorumLost = "GroupQuorumLost"
	// ReasonBlastRadiusCap: the group fenced its share for this interval.
	ReasonBlastRadiusCap = "BlastRadiusCap"
	// ReasonNotHeld: the condition's reason while nothing is held.
	ReasonNotHeld = "FencingActive"
)

// Reasons are the reasons a dead node is skipped or a group held, in the
// order they are checked.
var Reasons = []string{ReasonMaintenance, ReasonNoLease, ReasonGroupNotFenced, ReasonUnsafeTiming,
	ReasonStaleAPIView, ReasonClusterOutage, ReasonGroupQuorumLost, ReasonBlastRadiusCap}

// MinQuorumGroup is the smallest group the group quorum guard applies to,
// the fencing agents' own rule (membership.MinQuorumGroup): with fewer
// than three nodes a majority is all of them, or one node alone, and the
// agents fall back to the API check alone, so a group that small cannot
// keep running cut off from the control plane.
const MinQuorumGroup = 3

// Decision is the verdict on one dead node.
type Decision struct {
	Node, Group string
	Verdict     Verdict
	// KeepNode: after its pods are deleted, the Node stays (Static and
	// CloudStatic nodes, so they can rejoin; Notify mode).
	KeepNode bool
	// Notify: the node is fenced in Notify mode, so nothing has reset it:
	// its pods with ReadWriteOnce volumes are not freed unless its group
	// opts in (deckhousev1.FencingNotifyFreeReadWriteOnceAnnotation).
	Notify bool
	// LastRenewal is the renewal the node was judged by; Age how long ago
	// it was, and Delay the group's evacuation delay it exceeded.
	LastRenewal time.Time
	Age, Delay  time.Duration
	Reason      string
	Message     string
}

// Held is the FencingHeld state of a fenced group.
type Held struct {
	// Held: some fencing in the group is held back (Reason says why).
	Held            bool
	Reason, Message string
	// Dead is how many of its nodes are dead and not fenced yet.
	Dead int
}

// Plan is the decision for the whole cluster.
type Plan struct {
	// Decisions are about dead nodes only, oldest renewal first.
	Decisions []Decision
	// Groups is the FencingHeld state of every group with spec.fencing.
	Groups map[string]Held
	// Guard is ReasonStaleAPIView or ReasonClusterOutage while the outage
	// guard holds all fencing, "" otherwise; GuardMessage says why.
	Guard, GuardMessage string
	// Next is when to decide again at the latest, even if nothing changes:
	// when the next node would turn dead, the cap let the next one go, or
	// the controller's view would turn stale; 0 when no such time is known.
	Next time.Duration
}

// Delay is a group's evacuation delay, the group's watchdog timeout plus
// the margin, and an error when the group's timing is unsafe: it breaks
// margin > lease renew interval + agent API timeout + agent feed interval
// (the watchdog would not surely have fired when the pods are freed), or
// watchdog timeout > agent API timeout + agent feed interval (a node whose
// API answers slowly would be reset), or the timeout cannot be read.
func (t Timing) Delay(f *deckhousev1.FencingSpec) (time.Duration, error) {
	raw := deckhousev1.DefaultWatchdogTimeout
	if f != nil && f.Watchdog != nil && f.Watchdog.Timeout != "" {
		raw = f.Watchdog.Timeout
	}
	w, err := time.ParseDuration(raw)
	if err != nil || w <= 0 {
		return 0, fmt.Errorf("spec.fencing.watchdog.timeout %q is not a positive duration", raw)
	}
	delay := w + t.Margin
	agent := t.AgentAPITimeout + t.AgentFeedInterval
	if need := t.LeaseRenewInterval + agent; t.Margin <= need {
		return delay, fmt.Errorf("the evacuation delay %s (watchdog timeout %s + margin %s) is not longer than lease renew interval %s + agent API timeout %s + agent feed interval %s + watchdog timeout %s = %s: "+
			"pods could be freed before the watchdog fired; raise node-manager-controller's --fencing-margin above %s",
			delay, w, t.Margin, t.LeaseRenewInterval, t.AgentAPITimeout, t.AgentFeedInterval, w, need+w, need)
	}
	if w <= agent {
		return delay, fmt.Errorf("the watchdog timeout %s is not longer than the agent's API timeout %s + feed interval %s = %s: "+
			"a node whose API answers slowly would be reset; raise spec.fencing.watchdog.timeout above %s",
			w, t.AgentAPITimeout, t.AgentFeedInterval, agent, agent)
	}
	return delay, nil
}

// Decide fences the dead nodes it may and says why it skips the others.
// A node is dead when its Lease has not been renewed for longer than its
// group's evacuation delay. A dead node is skipped, in this order, when it
// is in maintenance, has no Lease, its group has no fencing, its group's
// timing is unsafe, the outage guard holds (the controller's view is
// stale, or too many candidates are dead at once), the group quorum guard
// holds its group, or its group has fenced its share of the interval (the
// blast-radius cap). A node fenced already (its Node kept) is not fenced
// again until its Lease is renewed.
//
// The group quorum guard mirrors the fencing agents' quorum: without the
// API an agent keeps feeding its watchdog while it sees a majority of its
// group, ⌊N/2⌋+1, that cannot reach the API either, in groups of at least
// MinQuorumGroup. Such a majority keeps running its pods, so freeing them
// would run them twice. Here N is the group's nodes in Facts (its Nodes
// labelled fencing-enabled, whatever their state), and when at least
// ⌊N/2⌋+1 of them are silent at once (missed two renewals, as the outage
// guard counts; a node fenced already at its renewal is not counted, as
// its watchdog has fired), none of the group's dead nodes is fenced. A
// silent minority lost both the API and the quorum, stopped feeding, and
// is fenced as before.
func Decide(f Facts) Plan {
	p := Plan{Groups: map[string]Held{}}
	next := func(at time.Time) {
		if d := at.Sub(f.Now); d > 0 && (p.Next == 0 || d < p.Next) {
			p.Next = d
		}
	}
	delays := map[string]time.Duration{}
	unsafe := map[string]error{}
	for name, g := range f.Groups {
		if g.Fencing == nil {
			continue
		}
		d, err := f.Timing.Delay(g.Fencing)
		delays[name] = d
		if err != nil {
			unsafe[name] = err
		}
		p.Groups[name] = Held{Reason: ReasonNotHeld, Message: fmt.Sprintf(
			"a node is fenced when its Lease has not been renewed for %s (watchdog timeout + margin %s)", d, f.Timing.Margin)}
	}

	// Sort out the dead: candidates are the nodes the guard counts.
	type dead struct {
		n   Node
		age time.Duration
	}
	// silentAfter: a candidate that has missed two renewals is silent. The
	// guard counts silent nodes, not dead ones: the nodes cut off by one
	// outage stopped renewing within one renew interval of each other, so
	// when the first of them turns dead the others are silent but not yet
	// dead, and counting the dead alone would let the first be fenced.
	silentAfter := 2 * f.Timing.LeaseRenewInterval
	var candidates, silent int
	// members and silentIn are the group quorum guard's N and the silent
	// among them, per group.
	members, silentIn := map[string]int{}, map[string]int{}
	var deadOnes []dead
	for _, n := range f.Nodes {
		g, fenced := f.Groups[n.Group]
		fenced = fenced && g.Fencing != nil
		delay := delays[n.Group]
		if !fenced {
			// Judged by the default timeout, only to tell whether to say so.
			delay, _ = f.Timing.Delay(nil)
		}
		members[n.Group]++
		if n.HasLease && !n.Fenced && f.Now.Sub(n.LastRenewal) > min(silentAfter, delay) {
			silentIn[n.Group]++
		}
		if n.Maintenance != "" || n.Fenced || !fenced {
			if n.HasLease && f.Now.Sub(n.LastRenewal) > delay && !n.Fenced {
				reason, msg := ReasonMaintenance, fmt.Sprintf("it carries %s (maintenance)", n.Maintenance)
				if n.Maintenance == "" {
					reason, msg = ReasonGroupNotFenced, fmt.Sprintf("its group %q does not exist or has no spec.fencing, so its watchdog timeout is unknown", n.Group)
				}
				p.Decisions = append(p.Decisions, skip(n, f.Now, delay, reason, msg))
			}
			continue
		}
		if !n.HasLease {
			p.Decisions = append(p.Decisions, skip(n, f.Now, delay, ReasonNoLease,
				"it has no Lease in kube-node-lease, so node-manager cannot tell whether it is alive"))
			continue
		}
		candidates++
		if f.Now.Sub(n.LastRenewal) > min(silentAfter, delay) {
			silent++
		}
		age := f.Now.Sub(n.LastRenewal)
		if age <= delay {
			next(n.LastRenewal.Add(delay + time.Millisecond))
			continue
		}
		deadOnes = append(deadOnes, dead{n, age})
	}
	slices.SortFunc(deadOnes, func(a, b dead) int {
		if c := a.n.LastRenewal.Compare(b.n.LastRenewal); c != 0 {
			return c
		}
		return strings.Compare(a.n.Name, b.n.Name)
	})

	// The outage guard.
	switch viewAge := f.Now.Sub(f.LastRenewalSeen); {
	case f.LastRenewalSeen.IsZero() || viewAge > f.Limits.APIViewTimeout:
		p.Guard = ReasonStaleAPIView
		p.GuardMessage = fmt.Sprintf("node-manager-controller has seen no node's Lease renewed for longer than %s: its view of the API is stale (its watch is broken, or the API is), so it fences nobody until it sees renewals again",
			f.Limits.APIViewTimeout)
		if f.LastRenewalSeen.IsZero() {
			p.GuardMessage = "node-manager-controller has seen no node's Lease: it fences nobody until it sees renewals"
		}
	case silent >= f.Limits.OutageMinNodes && silent*100 > f.Limits.OutagePercent*candidates:
		p.Guard = ReasonClusterOutage
		p.GuardMessage = fmt.Sprintf("%d of %d fenced nodes have stopped renewing their Leases at once (more than %d%%, at least %d): the control plane or the network to it failed rather than the nodes, so node-manager fences nobody until fewer are silent",
			silent, candidates, f.Limits.OutagePercent, f.Limits.OutageMinNodes)
	default:
		next(f.LastRenewalSeen.Add(f.Limits.APIViewTimeout + time.Millisecond))
	}

	// The group quorum guard: the fenced groups whose majority is silent,
	// held as soon as it is (before any of them is dead), so that the hold
	// lasts as long as the silence and HeldUntil keeps up with it.
	quorumLost := map[string]string{}
	for name, n := range members {
		quorum := n/2 + 1
		if g, ok := f.Groups[name]; !ok || g.Fencing == nil || n < MinQuorumGroup || silentIn[name] < quorum {
			continue
		}
		quorumLost[name] = fmt.Sprintf("%d of the %d fenced nodes of group %s have stopped renewing their Leases at once, a majority (at least %d): "+
			"they may be alive and cut off from the control plane together, where their fencing agents keep their watchdogs fed, "+
			"so node-manager fences none of the group's nodes until fewer than %d are silent",
			silentIn[name], n, name, quorum, quorum)
	}

	// Each dead node, oldest first, within its group's cap.
	fencedNow := map[string]int{}
	for _, d := range deadOnes {
		n, g := d.n, f.Groups[d.n.Group]
		delay := delays[n.Group]
		h := p.Groups[n.Group]
		h.Dead++
		switch {
		case unsafe[n.Group] != nil:
			p.Decisions = append(p.Decisions, skip(n, f.Now, delay, ReasonUnsafeTiming, "its group's fencing timing is unsafe: "+unsafe[n.Group].Error()))
		case p.Guard != "":
			p.Decisions = append(p.Decisions, skip(n, f.Now, delay, p.Guard, p.GuardMessage))
		case quorumLost[n.Group] != "":
			p.Decisions = append(p.Decisions, skip(n, f.Now, delay, ReasonGroupQuorumLost, quorumLost[n.Group]))
		case n.HeldUntil.After(n.LastRenewal) && f.Now.Sub(n.HeldUntil) <= delay:
			// Held until a moment ago: its watchdog may have been fed until
			// then, so it is dead a full delay after the hold.
			next(n.HeldUntil.Add(delay + time.Millisecond))
		default:
			limit := capOf(f.Limits, g.Size)
			_, retry := g.Recent[n.Name]
			used := fencedNow[n.Group]
			for name, at := range g.Recent {
				if name != n.Name && f.Now.Sub(at) < f.Limits.Interval {
					used++
					next(at.Add(f.Limits.Interval))
				}
			}
			if !retry && used >= limit {
				p.Decisions = append(p.Decisions, skip(n, f.Now, delay, ReasonBlastRadiusCap, fmt.Sprintf(
					"group %s has fenced %d node(s) in the last %s, its cap (at most %d, or %d%% of its %d nodes if that is more)",
					n.Group, used, f.Limits.Interval, f.Limits.MaxNodes, f.Limits.MaxPercent, g.Size)))
				if !h.Held {
					h.Held, h.Reason = true, ReasonBlastRadiusCap
				}
				break
			}
			if !retry {
				fencedNow[n.Group]++
			}
			keep := n.Notify || n.Type == deckhousev1.NodeTypeStatic || n.Type == deckhousev1.NodeTypeCloudStatic
			h.Dead--
			what := "its pods are force-deleted and its Node deleted"
			switch {
			case n.Notify:
				what = "its pods are force-deleted (but those with ReadWriteOnce volumes, unless the group opts in) and its Node kept (" + keptWhy(n) + ")"
			case keep:
				what = "its pods are force-deleted and its Node kept (" + keptWhy(n) + ")"
			}
			p.Decisions = append(p.Decisions, Decision{Node: n.Name, Group: n.Group, Verdict: Fence, KeepNode: keep, Notify: n.Notify,
				LastRenewal: n.LastRenewal, Age: d.age, Delay: delay, Reason: ReasonFenced,
				Message: fmt.Sprintf("node %s has not renewed its Lease for %s, longer than the evacuation delay %s, so %s: %s",
					n.Name, d.age.Round(time.Millisecond), delay, deadBecause(n), what)})
		}
		p.Groups[n.Group] = h
	}

	slices.SortStableFunc(p.Decisions, func(a, b Decision) int {
		if c := a.LastRenewal.Compare(b.LastRenewal); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})

	// Why each group is held.
	for name, h := range p.Groups {
		switch {
		case unsafe[name] != nil:
			h.Held, h.Reason, h.Message = true, ReasonUnsafeTiming, "node-manager fences no node of this group: "+unsafe[name].Error()
		case p.Guard != "":
			h.Held, h.Reason, h.Message = true, p.Guard, p.GuardMessage
		case quorumLost[name] != "":
			h.Held, h.Reason, h.Message = true, ReasonGroupQuorumLost, quorumLost[name]
		case h.Held:
			h.Message = fmt.Sprintf("%d dead node(s) wait for the blast-radius cap: at most %d node(s), or %d%% of the group's %d nodes if that is more, are fenced per %s",
				h.Dead, f.Limits.MaxNodes, f.Limits.MaxPercent, f.Groups[name].Size, f.Limits.Interval)
		}
		p.Groups[name] = h
	}
	return p
}

// capOf is how many nodes of a group of size nodes may be fenced per
// interval: MaxNodes, or MaxPercent of the group if that is more.
func capOf(l Limits, size int) int {
	return max(l.MaxNodes, size*l.MaxPercent/100)
}

// deadBecause says why a dead node is taken for down: its watchdog has
// fired, or, in Notify mode, which arms none, only that it is silent.
func deadBecause(n Node) string {
	if n.Notify {
		return "it is taken for down (Notify mode: no watchdog has reset it)"
	}
	return "its watchdog has fired"
}

func keptWhy(n Node) string {
	if n.Notify {
		return "fencing mode Notify"
	}
	return "a " + string(n.Type) + " node keeps its Node so it can rejoin"
}

func skip(n Node, now time.Time, delay time.Duration, reason, why string) Decision {
	age := time.Duration(0)
	if n.HasLease {
		age = now.Sub(n.LastRenewal)
	}
	return Decision{Node: n.Name, Group: n.Group, Verdict: Skip, LastRenewal: n.LastRenewal, Age: age, Delay: delay, Reason: reason,
		Message: fmt.Sprintf("node %s is not fenced: %s", n.Name, why)}
}
