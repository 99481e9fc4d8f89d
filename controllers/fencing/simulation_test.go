package fencing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// simNode is one machine of the simulation: it renews its Lease every
// renew interval (from its own phase) until it dies, unless an outage
// keeps its renewals from the API.
type simNode struct {
	Node
	phase   time.Duration
	diesAt  time.Time // zero: never
	gone    bool      // its Node was deleted
	fenceAt time.Time
	// cut: the node is in the group partition (cut off from the API, it
	// sees only the others cut off with it over gossip).
	cut bool
}

// TestSimulatedClustersAreFencedSafely runs Decide, second by second, over
// hundreds of random clusters for twenty minutes each: groups of random
// size, type, mode and watchdog timeout (some unsafe), nodes that die at
// random times, maintenance, outages (the fenced nodes cut off from the
// API while the control plane renews, or the API itself down), and a
// group partition (some nodes of one group cut off from the API and from
// the rest of their group; their agents keep feeding while they are a
// majority, as the agents' quorum rule says, else their watchdogs fire
// and they are dead). It checks what the tables cannot enumerate:
//   - no node is fenced before its Lease is older than its group's
//     evacuation delay, nor in a group whose timing is unsafe, nor in
//     maintenance, nor while it is alive and renewing;
//   - no node is fenced while the controller's view is stale, nor while
//     more than the outage share of the candidates is silent, nor in a
//     group of three or more whose majority is silent together;
//   - no node of a majority partition, whose agent keeps feeding its
//     watchdog, is fenced (its pods would run twice);
//   - no group fences more than its cap in any interval;
//   - every node that died, in a safe group, out of maintenance, is fenced
//     by the end when neither the outage guard nor its group's quorum
//     guard holds then.
func TestSimulatedClustersAreFencedSafely(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel() // a cluster of its own from its own seed; Decide is a pure function
			simulate(t, rand.New(rand.NewPCG(seed, 13)))
		})
	}
}

func simulate(t *testing.T, r *rand.Rand) {
	const (
		step  = time.Second
		steps = 20 * 60
	)
	renew := timing.LeaseRenewInterval
	start := t0
	groups := map[string]Group{}
	var ns []*simNode
	for g := range 1 + r.IntN(3) {
		name := fmt.Sprintf("g%d", g)
		typ := []deckhousev1.NodeType{deckhousev1.NodeTypeCloudEphemeral, deckhousev1.NodeTypeStatic, deckhousev1.NodeTypeCloudPermanent}[r.IntN(3)]
		timeout := []string{"60s", "30s", "20s", "5s"}[r.IntN(4)]
		mode := deckhousev1.FencingModeWatchdog
		if r.IntN(4) == 0 {
			mode = deckhousev1.FencingModeNotify
		}
		groups[name] = Group{Name: name, NodeType: typ, Fencing: &deckhousev1.FencingSpec{Mode: mode, Watchdog: &deckhousev1.WatchdogSpec{Timeout: timeout}}}
		for i := range 1 + r.IntN(12) {
			n := &simNode{Node: Node{Name: fmt.Sprintf("%s-%d", name, i), Group: name, Type: typ, Notify: mode == deckhousev1.FencingModeNotify, HasLease: true, LastRenewal: start},
				phase: time.Duration(r.IntN(int(renew/time.Millisecond))) * time.Millisecond}
			if r.IntN(3) == 0 {
				n.diesAt = start.Add(time.Duration(r.IntN(steps-8*60)) * step)
			}
			if r.IntN(8) == 0 {
				n.Maintenance = deckhousev1.FencingDisableAnnotation
			}
			ns = append(ns, n)
		}
	}
	// One outage in half the runs: the fenced nodes partitioned from the
	// API (the control plane still renews), or the API down (nothing does).
	var outageFrom, outageTo time.Time
	apiDown := r.IntN(2) == 0
	if r.IntN(2) == 0 {
		outageFrom = start.Add(time.Duration(r.IntN(10*60)) * step)
		outageTo = outageFrom.Add(time.Duration(30+r.IntN(5*60)) * step)
	}
	inOutage := func(at time.Time) bool { return !outageFrom.IsZero() && !at.Before(outageFrom) && at.Before(outageTo) }
	// A group partition in half the runs: a random share of one group.
	var partFrom, partTo time.Time
	var partGroup string
	partN := 0 // the group's size in its agents' last view of the API
	if r.IntN(2) == 0 {
		partGroup = fmt.Sprintf("g%d", r.IntN(len(groups)))
		partFrom = start.Add(time.Duration(r.IntN(10*60)) * step)
		partTo = partFrom.Add(time.Duration(30+r.IntN(5*60)) * step)
		for _, n := range ns {
			if n.Group == partGroup && r.IntN(3) > 0 {
				n.cut = true
			}
		}
	}
	inPartition := func(n *simNode, at time.Time) bool {
		return n.cut && !partFrom.IsZero() && !at.Before(partFrom) && at.Before(partTo)
	}
	// feeding: the cut-off node's agent keeps feeding, as the agents'
	// quorum rule says (membership.QuorumOf): it sees a majority of its
	// group's N cut off with it.
	feeding := map[string]bool{}

	lastSeen := start
	fencedAt := map[string][]time.Time{}
	var guardAtEnd string
	var heldAtEnd map[string]Held
	for i := range steps {
		now := start.Add(time.Duration(i) * step)
		outage := inOutage(now)
		if !(outage && apiDown) {
			lastSeen = now // the control-plane node's own renewals
		}
		if now.Equal(partFrom) {
			for _, n := range ns {
				if n.Group == partGroup && !n.gone {
					partN++
				}
			}
		}
		cutAlive := 0
		for _, n := range ns {
			if inPartition(n, now) && !n.gone && (n.diesAt.IsZero() || now.Before(n.diesAt)) {
				cutAlive++
			}
		}
		clear(feeding)
		for _, n := range ns {
			if !inPartition(n, now) || n.gone || !(n.diesAt.IsZero() || now.Before(n.diesAt)) {
				continue
			}
			if partN >= MinQuorumGroup && cutAlive >= partN/2+1 {
				feeding[n.Name] = true
			} else {
				// Cut off from both: it stops feeding and its watchdog
				// resets it; it stays down (no reboot after a panic).
				n.diesAt = now
			}
		}
		for _, n := range ns {
			alive := n.diesAt.IsZero() || now.Before(n.diesAt)
			if n.gone || !alive || outage || inPartition(n, now) {
				continue
			}
			if (now.Sub(start)-n.phase)%renew < step {
				n.LastRenewal = now
				n.Fenced = false // back: a kept node rejoins
			}
		}
		f := Facts{Now: now, Groups: map[string]Group{}, LastRenewalSeen: lastSeen, Timing: timing, Limits: limits}
		for name, g := range groups {
			g.Size, g.Recent = 0, map[string]time.Time{}
			for _, n := range ns {
				if n.Group == name && !n.gone {
					g.Size++
				}
			}
			for node, ats := range fencedAt {
				for _, at := range ats {
					if len(node) > len(name) && node[:len(name)+1] == name+"-" && now.Sub(at) < limits.Interval {
						g.Recent[node] = at
					}
				}
			}
			f.Groups[name] = g
		}
		for _, n := range ns {
			if !n.gone {
				f.Nodes = append(f.Nodes, n.Node)
			}
		}
		p := Decide(f)
		guardAtEnd, heldAtEnd = p.Guard, p.Groups
		// What the guards saw: silent candidates, and silent members per
		// group (a node fenced already at its renewal is not counted).
		silent, candidates := 0, 0
		members, silentIn := map[string]int{}, map[string]int{}
		for _, n := range f.Nodes {
			members[n.Group]++
			if !n.Fenced && now.Sub(n.LastRenewal) > 2*timing.LeaseRenewInterval {
				silentIn[n.Group]++
			}
			if n.Maintenance == "" && !n.Fenced {
				candidates++
				if now.Sub(n.LastRenewal) > 2*timing.LeaseRenewInterval {
					silent++
				}
			}
		}
		for _, d := range p.Decisions {
			if d.Verdict != Fence {
				continue
			}
			var n *simNode
			for _, c := range ns {
				if c.Name == d.Node {
					n = c
				}
			}
			delay, err := timing.Delay(groups[n.Group].Fencing)
			switch {
			case err != nil:
				t.Fatalf("%s: fenced %s in a group whose timing is unsafe: %v", now, n.Name, err)
			case now.Sub(n.LastRenewal) <= delay:
				t.Fatalf("%s: fenced %s %s after its last renewal, within the delay %s", now, n.Name, now.Sub(n.LastRenewal), delay)
			case n.Maintenance != "":
				t.Fatalf("%s: fenced %s in maintenance", now, n.Name)
			case now.Sub(lastSeen) > limits.APIViewTimeout:
				t.Fatalf("%s: fenced %s while the controller's view was %s old", now, n.Name, now.Sub(lastSeen))
			case silent >= limits.OutageMinNodes && silent*100 > limits.OutagePercent*candidates:
				t.Fatalf("%s: fenced %s while %d of %d candidates were silent", now, n.Name, silent, candidates)
			case members[n.Group] >= 3 && silentIn[n.Group] >= members[n.Group]/2+1:
				t.Fatalf("%s: fenced %s while %d of the %d nodes of its group were silent, a majority", now, n.Name, silentIn[n.Group], members[n.Group])
			case feeding[n.Name]:
				t.Fatalf("%s: fenced %s, cut off with a majority of its group (%d of %d), whose agent keeps feeding its watchdog: its pods run twice",
					now, n.Name, cutAlive, partN)
			case (n.diesAt.IsZero() || now.Before(n.diesAt)) && !outage && now.Sub(n.LastRenewal) < renew+step:
				t.Fatalf("%s: fenced %s, which is alive and renewing", now, n.Name)
			}
			// The cap: fences of the group within the last interval.
			g := groups[n.Group]
			recent := 0
			for node, ats := range fencedAt {
				for _, at := range ats {
					if node != n.Name && node[:len(n.Group)+1] == n.Group+"-" && now.Sub(at) < limits.Interval {
						recent++
					}
				}
			}
			if limit := capOf(limits, f.Groups[n.Group].Size); recent >= limit {
				t.Fatalf("%s: fenced %s with %d nodes of group %s fenced in the last %s, cap %d", now, n.Name, recent, g.Name, limits.Interval, limit)
			}
			fencedAt[n.Name] = append(fencedAt[n.Name], now)
			n.fenceAt = now
			if d.KeepNode {
				n.Fenced = true
			} else {
				n.gone = true
			}
		}
	}
	if guardAtEnd != "" {
		return
	}
	for _, n := range ns {
		_, unsafe := timing.Delay(groups[n.Group].Fencing)
		if heldAtEnd[n.Group].Reason == ReasonGroupQuorumLost {
			continue
		}
		if !n.diesAt.IsZero() && n.Maintenance == "" && unsafe == nil && n.fenceAt.IsZero() {
			t.Errorf("%s died at %s and was never fenced", n.Name, n.diesAt)
		}
	}
}
