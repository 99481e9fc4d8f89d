package agent

import (
	"fmt"
	"testing"

	"github.com/node-manager/node-manager/agents/fencing-agent/membership"
)

// TestDecideTable covers every combination of API × quorum × outage quorum
// × maintenance × armed × ready. The mode is not an input: Notify decides alike and only
// never opens the device (TestNotifyModeNeverOpensTheDevice).
func TestDecideTable(t *testing.T) {
	quorums := []membership.Quorum{membership.QuorumHeld, membership.QuorumLost, membership.QuorumTooSmall}
	for _, ready := range []bool{true, false} {
		for _, armed := range []bool{true, false} {
			for _, maint := range []bool{true, false} {
				for _, api := range []bool{true, false} {
					for _, q := range quorums {
						for _, oq := range quorums {
							for _, stale := range []bool{false, true} {
								s := State{Ready: ready, Armed: armed, Maintenance: maint, APIAnswered: api, Quorum: q, OutageQuorum: oq, LeaseStale: stale && api}
								t.Run(fmt.Sprintf("ready=%v/armed=%v/maintenance=%v/api=%v/quorum=%v/outage=%v/leaseStale=%v", ready, armed, maint, api, q, oq, s.LeaseStale), func(t *testing.T) {
									want := expected(s)
									if got := Decide(s); got.Action != want {
										t.Fatalf("Decide(%+v) = %v (%s), want %v", s, got.Action, got.Reason, want)
									}
								})
							}
						}
					}
				}
			}
		}
	}
}

// expected spells the rule out case by case, independently of Decide's
// switch.
func expected(s State) Action {
	if s.Maintenance {
		if s.Armed {
			return Disarm
		}
		return Wait
	}
	if !s.Armed {
		if s.Ready && s.APIAnswered && !s.LeaseStale {
			return Arm
		}
		return Wait
	}
	if s.LeaseStale {
		return Starve
	}
	if s.APIAnswered || s.OutageQuorum == membership.QuorumHeld {
		return Feed
	}
	return Starve
}

func TestTheKeyCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    State
		want Action
	}{
		{"control plane down, a majority of the group alive without it: keep feeding",
			State{Ready: true, Armed: true, APIAnswered: false, Quorum: membership.QuorumHeld, OutageQuorum: membership.QuorumHeld}, Feed},
		{"API lost while the peers seen still reach it: this node is cut off, stop feeding",
			State{Ready: true, Armed: true, APIAnswered: false, Quorum: membership.QuorumHeld, OutageQuorum: membership.QuorumLost}, Starve},
		{"cut off from both: stop feeding",
			State{Ready: true, Armed: true, APIAnswered: false, Quorum: membership.QuorumLost}, Starve},
		{"API up, peers gone: keep feeding",
			State{Ready: true, Armed: true, APIAnswered: true, Quorum: membership.QuorumLost}, Feed},
		{"API up but the kubelet's Lease stale: stop feeding",
			State{Ready: true, Armed: true, APIAnswered: true, LeaseStale: true, Quorum: membership.QuorumHeld}, Starve},
		{"small group, API down: stop feeding",
			State{Ready: true, Armed: true, APIAnswered: false, Quorum: membership.QuorumTooSmall}, Starve},
		{"maintenance while armed: disarm even when cut off",
			State{Ready: true, Armed: true, Maintenance: true, Quorum: membership.QuorumLost}, Disarm},
		{"never arm in maintenance",
			State{Ready: true, Maintenance: true, APIAnswered: true, Quorum: membership.QuorumHeld}, Wait},
		{"never arm before ready",
			State{APIAnswered: true, Quorum: membership.QuorumHeld}, Wait},
	} {
		if got := Decide(tc.s); got.Action != tc.want {
			t.Errorf("%s: got %v (%s), want %v", tc.name, got.Action, got.Reason, tc.want)
		}
	}
}
