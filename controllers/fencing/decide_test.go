package fencing

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

var (
	t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	// timing is the defaults: a 60 s watchdog gives a 90 s evacuation delay.
	timing = Timing{Margin: 30 * time.Second, AgentAPITimeout: 10 * time.Second, AgentFeedInterval: 5 * time.Second, LeaseRenewInterval: 10 * time.Second}
	limits = Limits{Interval: time.Minute, MaxNodes: 1, MaxPercent: 20, OutagePercent: 50, OutageMinNodes: 2, APIViewTimeout: 30 * time.Second}
	fresh  = t0.Add(-10 * time.Second)
	stale  = t0.Add(-100 * time.Second)
)

func watchdog(timeout string) *deckhousev1.FencingSpec {
	return &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog, Watchdog: &deckhousev1.WatchdogSpec{Timeout: timeout}}
}

// cluster is a fenced CloudEphemeral group "w" of size nodes, and a Static
// group "s", as Facts with nodes added by the case.
func cluster(size int, nodes ...Node) Facts {
	return Facts{
		Now: t0, Nodes: nodes, LastRenewalSeen: t0.Add(-time.Second), Timing: timing, Limits: limits,
		Groups: map[string]Group{
			"w": {Name: "w", Fencing: watchdog("60s"), NodeType: deckhousev1.NodeTypeCloudEphemeral, Size: size},
			"s": {Name: "s", Fencing: watchdog("60s"), NodeType: deckhousev1.NodeTypeStatic, Size: size},
		},
	}
}

func node(name, group string, renewed time.Time) Node {
	typ := deckhousev1.NodeTypeCloudEphemeral
	if group == "s" {
		typ = deckhousev1.NodeTypeStatic
	}
	return Node{Name: name, Group: group, Type: typ, HasLease: true, LastRenewal: renewed}
}

// healthy are n fresh nodes of group w.
func healthy(n int) []Node {
	var out []Node
	for i := range n {
		out = append(out, node(fmt.Sprintf("ok-%d", i), "w", fresh))
	}
	return out
}

// verdicts renders a plan's decisions as "node:Fence", "node:Fence(keep)"
// or "node:Skip/Reason".
func verdicts(p Plan) []string {
	var out []string
	for _, d := range p.Decisions {
		switch {
		case d.Verdict == Fence && d.KeepNode:
			out = append(out, d.Node+":Fence(keep)")
		case d.Verdict == Fence:
			out = append(out, d.Node+":Fence")
		default:
			out = append(out, d.Node+":Skip/"+d.Reason)
		}
	}
	return out
}

func TestDecideFencesOnlyDeadNodesItMay(t *testing.T) {
	notify := node("n", "w", stale)
	notify.Notify = true
	inMaintenance := node("m", "w", stale)
	inMaintenance.Maintenance = deckhousev1.DisruptionApprovedAnnotation
	// Alone in group s, too small for the group quorum guard.
	inMaintenanceS := node("m", "s", stale)
	inMaintenanceS.Maintenance = deckhousev1.DisruptionApprovedAnnotation
	cloudStatic := node("cs", "w", stale)
	cloudStatic.Type = deckhousev1.NodeTypeCloudStatic
	noLease := Node{Name: "nl", Group: "w", Type: deckhousev1.NodeTypeCloudEphemeral}
	fencedAlready := node("f", "s", stale)
	fencedAlready.Fenced = true
	recentlyFenced := cluster(10, append(healthy(3), node("a", "w", stale), node("b", "w", stale.Add(time.Second)))...)
	recentlyFenced.Groups["w"] = Group{Name: "w", Fencing: watchdog("60s"), Size: 5, Recent: map[string]time.Time{"old": t0.Add(-30 * time.Second)}}
	retry := cluster(10, node("a", "w", stale))
	retry.Groups["w"] = Group{Name: "w", Fencing: watchdog("60s"), Size: 10, Recent: map[string]time.Time{"a": t0.Add(-5 * time.Second)}}
	expired := cluster(10, node("a", "w", stale))
	expired.Groups["w"] = Group{Name: "w", Fencing: watchdog("60s"), Size: 10, Recent: map[string]time.Time{"old": t0.Add(-61 * time.Second)}}

	cases := []struct {
		name  string
		facts Facts
		want  []string
		guard string
	}{
		{"a fresh lease: nothing to decide", cluster(3, node("a", "w", fresh)), nil, ""},
		{"a lease exactly at the delay is not dead yet", cluster(3, node("a", "w", t0.Add(-90*time.Second))), nil, ""},
		{"a stale lease: pods freed and the Node deleted", cluster(3, node("a", "w", stale)), []string{"a:Fence"}, ""},
		{"a stale lease of a Static node: its Node kept", cluster(3, node("a", "s", stale)), []string{"a:Fence(keep)"}, ""},
		{"a stale lease of a CloudStatic node: its Node kept", cluster(3, cloudStatic), []string{"cs:Fence(keep)"}, ""},
		{"a stale lease in Notify mode: its Node kept", cluster(3, notify), []string{"n:Fence(keep)"}, ""},
		{"maintenance exempts a dead node", cluster(3, inMaintenance), []string{"m:Skip/Maintenance"}, ""},
		{"no Lease: not fenced", cluster(3, noLease), []string{"nl:Skip/NoLease"}, ""},
		{"a group without spec.fencing: not fenced", cluster(3, node("a", "gone", stale)), []string{"a:Skip/GroupNotFenced"}, ""},
		{"fenced already at this renewal: nothing to decide", cluster(3, fencedAlready), nil, ""},
		{"the cap: one node per interval, oldest first", cluster(5, append(healthy(3), node("b", "w", stale.Add(time.Second)), node("a", "w", stale))...),
			[]string{"a:Fence", "b:Skip/BlastRadiusCap"}, ""},
		{"the cap counts nodes fenced earlier in the interval", recentlyFenced, []string{"a:Skip/BlastRadiusCap", "b:Skip/BlastRadiusCap"}, ""},
		{"a node fenced earlier in the interval is retried within the cap", retry, []string{"a:Fence"}, ""},
		{"the cap's interval passes", expired, []string{"a:Fence"}, ""},
		{"the cap is 20% of a large group if that is more than one node",
			cluster(10, append(healthy(6), node("a", "w", stale), node("b", "w", stale), node("c", "w", stale))...),
			[]string{"a:Fence", "b:Fence", "c:Skip/BlastRadiusCap"}, ""},
		{"caps are per group", cluster(4, node("a", "w", stale), node("b", "s", stale), node("ok", "w", fresh), node("ok2", "s", fresh)),
			[]string{"a:Fence", "b:Fence(keep)"}, ""},
		{"one dead node of one: fenced (the guard needs two)", cluster(1, node("a", "w", stale)), []string{"a:Fence"}, ""},
		{"the outage guard: most fenced nodes dead at once, nobody fenced",
			cluster(3, node("a", "w", stale), node("b", "w", stale), node("c", "w", fresh)),
			[]string{"a:Skip/ClusterOutage", "b:Skip/ClusterOutage"}, ReasonClusterOutage},
		{"half dead is not more than half",
			cluster(4, node("a", "w", stale), node("b", "w", stale), node("c", "w", fresh), node("d", "w", fresh)),
			[]string{"a:Fence", "b:Skip/BlastRadiusCap"}, ""},
		{"the guard counts nodes that stopped renewing but are not dead yet",
			cluster(3, node("a", "w", stale), node("b", "w", t0.Add(-80*time.Second)), node("c", "w", fresh)),
			[]string{"a:Skip/ClusterOutage"}, ReasonClusterOutage},
		{"a node that missed one renewal is not silent",
			cluster(3, node("a", "w", stale), node("b", "w", t0.Add(-19*time.Second)), node("c", "w", fresh)),
			[]string{"a:Fence"}, ""},
		{"maintenance nodes are not counted by the guard",
			cluster(3, node("a", "w", stale), inMaintenanceS, node("c", "w", fresh)),
			[]string{"a:Fence", "m:Skip/Maintenance"}, ""},
		{"the group quorum guard: 3 of 5 silent at once, none of the group fenced",
			cluster(5, append(healthy(2), node("a", "w", stale), node("b", "w", stale), node("c", "w", t0.Add(-25*time.Second)),
				node("s1", "s", fresh), node("s2", "s", fresh))...),
			[]string{"a:Skip/GroupQuorumLost", "b:Skip/GroupQuorumLost"}, ""},
		{"2 of 5 silent: a minority, fenced within the cap",
			cluster(5, append(healthy(3), node("a", "w", stale), node("b", "w", stale.Add(time.Second)), node("s1", "s", fresh), node("s2", "s", fresh))...),
			[]string{"a:Fence", "b:Skip/BlastRadiusCap"}, ""},
		{"a node that missed one renewal does not make a majority",
			cluster(5, append(healthy(2), node("a", "w", stale), node("b", "w", stale), node("c", "w", t0.Add(-19*time.Second)),
				node("s1", "s", fresh), node("s2", "s", fresh))...),
			[]string{"a:Fence", "b:Skip/BlastRadiusCap"}, ""},
		{"a node fenced already does not make a majority",
			cluster(3, node("a", "s", stale), fencedAlready, node("ok", "s", fresh), node("w1", "w", fresh), node("w2", "w", fresh), node("w3", "w", fresh)),
			[]string{"a:Fence(keep)"}, ""},
		{"a group of 2 both silent is not held by the group quorum guard",
			cluster(2, node("a", "s", stale), node("b", "s", stale), node("w1", "w", fresh), node("w2", "w", fresh), node("w3", "w", fresh)),
			[]string{"a:Fence(keep)", "b:Skip/BlastRadiusCap"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.facts)
			if got := verdicts(p); !slices.Equal(got, tc.want) {
				t.Errorf("decisions = %v, want %v", got, tc.want)
			}
			if p.Guard != tc.guard {
				t.Errorf("guard = %q, want %q", p.Guard, tc.guard)
			}
			for _, d := range p.Decisions {
				if d.Message == "" || !strings.Contains(d.Message, d.Node) {
					t.Errorf("decision about %s says %q, which does not name it", d.Node, d.Message)
				}
			}
		})
	}
}

func TestDecideFencesNobodyWhileItsViewOfTheAPIIsStale(t *testing.T) {
	f := cluster(3, node("a", "w", stale))
	f.LastRenewalSeen = t0.Add(-31 * time.Second)
	p := Decide(f)
	if got := verdicts(p); !slices.Equal(got, []string{"a:Skip/StaleAPIView"}) {
		t.Errorf("decisions = %v, want a:Skip/StaleAPIView", got)
	}
	for _, g := range []string{"w", "s"} {
		if h := p.Groups[g]; !h.Held || h.Reason != ReasonStaleAPIView {
			t.Errorf("group %s = %+v, want held for StaleAPIView", g, h)
		}
	}
	f.LastRenewalSeen = time.Time{}
	if p := Decide(f); p.Guard != ReasonStaleAPIView {
		t.Errorf("with no renewal ever seen, guard = %q, want StaleAPIView", p.Guard)
	}
	f.LastRenewalSeen = t0.Add(-29 * time.Second)
	if got := verdicts(Decide(f)); !slices.Equal(got, []string{"a:Fence"}) {
		t.Errorf("with a renewal seen 29 s ago, decisions = %v, want a:Fence", got)
	}
}

func TestDecideRefusesAGroupWhoseTimingBreaksTheInequality(t *testing.T) {
	t.Run("a margin too short for the agents", func(t *testing.T) {
		f := cluster(3, node("a", "w", t0.Add(-86*time.Second)))
		// 25 s = lease renew 10 s + API timeout 10 s + feed 5 s: not more.
		f.Timing.Margin = 25 * time.Second
		p := Decide(f)
		if got := verdicts(p); !slices.Equal(got, []string{"a:Skip/UnsafeTiming"}) {
			t.Errorf("decisions = %v, want a:Skip/UnsafeTiming", got)
		}
		for _, g := range []string{"w", "s"} {
			h := p.Groups[g]
			if !h.Held || h.Reason != ReasonUnsafeTiming || !strings.Contains(h.Message, "--fencing-margin above 25s") {
				t.Errorf("group %s = %+v, want held for UnsafeTiming, naming the margin needed", g, h)
			}
		}
	})
	t.Run("a watchdog timeout shorter than the agent's check", func(t *testing.T) {
		f := cluster(3, node("a", "w", stale))
		f.Groups["w"] = Group{Name: "w", Fencing: watchdog("15s"), Size: 3}
		p := Decide(f)
		if got := verdicts(p); !slices.Equal(got, []string{"a:Skip/UnsafeTiming"}) {
			t.Errorf("decisions = %v, want a:Skip/UnsafeTiming", got)
		}
		if h := p.Groups["w"]; !h.Held || !strings.Contains(h.Message, "raise spec.fencing.watchdog.timeout above 15s") {
			t.Errorf("group w = %+v, want held, naming the timeout needed", h)
		}
		if h := p.Groups["s"]; h.Held {
			t.Errorf("group s, whose timing is safe, = %+v, want not held", h)
		}
	})
	t.Run("the boundary: a margin just over the sum is safe", func(t *testing.T) {
		tm := timing
		tm.Margin = 25*time.Second + time.Millisecond
		if _, err := tm.Delay(watchdog("16s")); err != nil {
			t.Errorf("Delay = %v, want safe", err)
		}
	})
}

func TestDecideHoldsAGroupWhoseMajorityStoppedRenewing(t *testing.T) {
	f := cluster(5, append(healthy(2), node("a", "w", stale), node("b", "w", stale), node("c", "w", t0.Add(-25*time.Second)),
		node("s1", "s", fresh), node("s2", "s", fresh))...)
	p := Decide(f)
	h := p.Groups["w"]
	if !h.Held || h.Reason != ReasonGroupQuorumLost || h.Dead != 2 || !strings.Contains(h.Message, "3 of the 5 fenced nodes of group w") {
		t.Errorf("group w = %+v, want held by GroupQuorumLost with 2 dead nodes, saying 3 of the 5 are silent", h)
	}
	if s := p.Groups["s"]; s.Held {
		t.Errorf("group s = %+v, want not held: the guard is per group", s)
	}
	// The majority comes back but for the dead ones: a minority, fenced.
	f.Nodes[4].LastRenewal = fresh
	if got := verdicts(Decide(f)); !slices.Equal(got, []string{"a:Fence", "b:Skip/BlastRadiusCap"}) {
		t.Errorf("with c renewing again, decisions = %v, want a:Fence, b:Skip/BlastRadiusCap", got)
	}
}

// A group's majority silent is held before any of it is dead, and a node
// held so is dead only a full evacuation delay after its last hold, since
// its agent may have kept feeding until then: when a partition heals node
// by node, the majority dissolves while some of it is still cut off, and
// those nodes' watchdogs start only then.
func TestDecideCountsTheDelayFromTheEndOfAHold(t *testing.T) {
	silentNotDead := t0.Add(-25 * time.Second)
	f := cluster(5, node("s1", "s", fresh), node("s2", "s", fresh), node("s3", "s", fresh), node("s4", "s", fresh),
		node("a", "w", silentNotDead), node("b", "w", silentNotDead), node("c", "w", silentNotDead))
	if h := Decide(f).Groups["w"]; !h.Held || h.Reason != ReasonGroupQuorumLost || h.Dead != 0 {
		t.Errorf("group w = %+v, want held by GroupQuorumLost as soon as its majority is silent, none dead yet", h)
	}
	// Long after, a and b come back; c, silent for ten minutes, was held
	// until a moment ago: not dead yet.
	f.Nodes[4].LastRenewal, f.Nodes[5].LastRenewal, f.Nodes[6].LastRenewal = fresh, fresh, t0.Add(-10*time.Minute)
	f.Nodes[6].HeldUntil = t0.Add(-time.Second)
	if got := verdicts(Decide(f)); len(got) != 0 {
		t.Errorf("decisions = %v, want none: c was held a second ago, its watchdog may have been fed until then", got)
	}
	f.Nodes[6].HeldUntil = t0.Add(-91 * time.Second)
	if got := verdicts(Decide(f)); !slices.Equal(got, []string{"c:Fence"}) {
		t.Errorf("a delay after the hold, decisions = %v, want c:Fence", got)
	}
}

func TestDecideHoldsAGroupAtItsCapAndSaysWhenToLookAgain(t *testing.T) {
	f := cluster(5, append(healthy(2), node("a", "w", stale), node("b", "w", stale.Add(time.Second)), node("c", "w", fresh))...)
	p := Decide(f)
	h := p.Groups["w"]
	if !h.Held || h.Reason != ReasonBlastRadiusCap || h.Dead != 1 {
		t.Errorf("group w = %+v, want held by BlastRadiusCap with 1 dead node waiting", h)
	}
	if s := p.Groups["s"]; s.Held || s.Reason != ReasonNotHeld {
		t.Errorf("group s = %+v, want not held", s)
	}
	// c turns dead 80 s from now (renewed 10 s ago, delay 90 s); the view
	// turns stale 29 s from now. The earliest wins.
	if want := 29*time.Second + time.Millisecond; p.Next != want {
		t.Errorf("Next = %s, want %s", p.Next, want)
	}
	f.Groups["w"] = Group{Name: "w", Fencing: watchdog("60s"), Size: 5, Recent: map[string]time.Time{"x": t0.Add(-50 * time.Second)}}
	if p := Decide(f); p.Next != 10*time.Second {
		t.Errorf("with a node fenced 50 s ago, Next = %s, want 10s (when the cap lets the next one go)", p.Next)
	}
}
