package agent

import (
	"fmt"
	"time"

	"github.com/node-manager/node-manager/agents/fencing-agent/membership"
)

// State is what the agent knows at one tick of its loop.
type State struct {
	// Ready: joined the group's gossip and the Node caches synced. Nothing
	// is armed before (Deckhouse's third generation learned that arming
	// before it knew its peers reset nodes at start).
	Ready bool
	// Armed: the watchdog is open (in Notify mode: the agent has promised,
	// by the label, that it watches).
	Armed bool
	// Maintenance: the Node carries one of the maintenance annotations.
	Maintenance bool
	// APIAnswered: the check of this tick got an answer from the API.
	APIAnswered bool
	// LeaseStale: the API answered, but the node's Lease was last renewed
	// more than LeaseStaleAfter ago (LeaseAge): the kubelet is down or
	// stuck, and the fencing controller will free the node's pods.
	LeaseStale bool
	LeaseAge   time.Duration
	// LeaseUnread: this tick could not read the Lease (LeaseError says
	// why); LeaseStale is then whether it has gone unread for longer than
	// LeaseStaleAfter (LeaseAge is that time), or was never read: the
	// agent cannot tell whether the kubelet renews it, and the controller,
	// which can, frees the node's pods when it does not.
	LeaseUnread bool
	LeaseError  error
	// Quorum is what gossip says (membership.QuorumOf) of the members this
	// node sees alive.
	Quorum membership.Quorum
	// OutageQuorum is the same rule over the members this node sees alive
	// that cannot reach the API either (itself included): held, a majority
	// of the group is together and cut off from the control plane.
	OutageQuorum membership.Quorum
}

// Action is what the agent does about it.
type Action int

const (
	// Wait: do nothing this tick (not ready, or disarmed and unable to arm).
	Wait Action = iota
	// Arm: open the device, then label the Node.
	Arm
	// Feed: write to the device.
	Feed
	// Starve: armed but cut off; do not feed, so the watchdog resets the
	// node before the fencing controller frees its pods.
	Starve
	// Disarm: remove the label, then the magic close.
	Disarm
)

func (a Action) String() string {
	return [...]string{"wait", "arm", "feed", "starve", "disarm"}[a]
}

// Decision is an Action and why, in words for logs and /readyz.
type Decision struct {
	Action Action
	Reason string
}

// Decide is the agent's rule, a pure function of the State:
//   - in maintenance it is disarmed, and never arms (Deckhouse crashed on
//     nodes in maintenance because it armed unconditionally at start);
//   - it arms only once ready, and only while the API answers: arming
//     ends with labelling the Node, which needs the API;
//   - armed, it stops feeding while its node's Lease is stale though the
//     API answers: the controller fences on the Lease, and a node whose
//     kubelet died still runs its containers, so the watchdog must reset
//     it first. A Lease the agent has not been able to read for as long
//     (403 after an RBAC drift, 429, 5xx) counts as stale: the agent
//     cannot tell, and the controller can; one never read blocks arming;
//   - armed, it feeds while EITHER the API answers OR it sees a majority
//     of its group that cannot reach the API either, and stops feeding
//     only when it has lost both. Such a majority means the control plane
//     is down (or cut off) for the group, not this node: the fencing
//     controller holds a group whose majority stops renewing at once, so
//     nobody frees their pods while they run. A node that sees its
//     majority but whose peers still reach the API is the one cut off: its
//     Lease goes stale while theirs do not, the controller will free its
//     pods, so it must not keep feeding. A group too small for a quorum has
//     only the API check.
//
// The mode does not appear: Notify decides the same and only never opens
// the device.
func Decide(s State) Decision {
	switch {
	case s.Maintenance && s.Armed:
		return Decision{Disarm, "the node is in maintenance"}
	case s.Maintenance:
		return Decision{Wait, "the node is in maintenance: staying disarmed"}
	case !s.Ready && !s.Armed:
		return Decision{Wait, "not joined to the group's gossip or the Node caches not synced yet"}
	case !s.Armed && s.APIAnswered && s.LeaseStale && s.LeaseUnread:
		return Decision{Wait, fmt.Sprintf("the node's Lease cannot be read (%v): not arming while the agent cannot see the kubelet renew it", s.LeaseError)}
	case !s.Armed && s.APIAnswered && s.LeaseStale:
		return Decision{Wait, fmt.Sprintf("the node's Lease was last renewed %s ago: not arming while the kubelet does not renew it", s.LeaseAge.Round(time.Second))}
	case !s.Armed && s.APIAnswered:
		return Decision{Arm, "ready and the API answers"}
	case !s.Armed:
		return Decision{Wait, "the API does not answer, so the Node cannot be labelled: not arming yet"}
	case s.APIAnswered && s.LeaseStale && s.LeaseUnread:
		return Decision{Starve, fmt.Sprintf("the API answers, but the node's Lease has not been read for %s (%v): the agent cannot tell whether the kubelet renews it, and the fencing controller frees this node's pods if it does not", s.LeaseAge.Round(time.Second), s.LeaseError)}
	case s.APIAnswered && s.LeaseStale:
		return Decision{Starve, fmt.Sprintf("the API answers, but the node's Lease was last renewed %s ago: the kubelet is not renewing it, and the fencing controller will free this node's pods", s.LeaseAge.Round(time.Second))}
	case s.APIAnswered && s.Quorum == membership.QuorumTooSmall:
		return Decision{Feed, "the API answers (the group is too small for a quorum: API check only)"}
	case s.APIAnswered:
		return Decision{Feed, "the API answers"}
	case s.OutageQuorum == membership.QuorumHeld:
		return Decision{Feed, "the API does not answer, and this node sees a majority of its group without the API too: the control plane is down, not this node"}
	case s.Quorum == membership.QuorumHeld:
		return Decision{Starve, "the API does not answer while the members this node sees still reach it: this node is the one cut off"}
	case s.Quorum == membership.QuorumTooSmall:
		return Decision{Starve, "the API does not answer and the group is too small for a quorum: cut off"}
	default:
		return Decision{Starve, "the API does not answer and this node sees less than a majority of its group: cut off"}
	}
}
