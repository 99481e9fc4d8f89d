package membership

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// The reasons a gossip message or member is refused, the values of the
// agent's fencing_agent_gossip_rejected_total{reason}: a fixed set.
const (
	// RejectedKey: a message not encrypted with the group's keyring (or in
	// the clear), dropped by memberlist.
	RejectedKey = "key"
	// RejectedMember: an alive member whose name is no Node of the group,
	// or who is announced at another address than its Node's InternalIP.
	RejectedMember = "member"
	// RejectedMerge: a push/pull that lists more members than the group
	// could hold, refused whole.
	RejectedMerge = "merge"
	// RejectedSource: a packet or stream from an address that is not one
	// of the group's Nodes' InternalIPs.
	RejectedSource = "source"
)

// RejectedReasons are every reason, for exporting each series from 0.
var RejectedReasons = []string{RejectedKey, RejectedMember, RejectedMerge, RejectedSource}

// rejections counts refusals by reason.
type rejections struct{ key, member, merge, source atomic.Uint64 }

func (r *rejections) of(reason string) *atomic.Uint64 {
	switch reason {
	case RejectedKey:
		return &r.key
	case RejectedMember:
		return &r.member
	case RejectedMerge:
		return &r.merge
	default:
		return &r.source
	}
}

// admission is which members the gossip admits: this node, and the Nodes
// of the group as the agent last listed them (SetGroup), each at its
// InternalIP. During an API outage the agent's cache keeps its last view,
// so the set does not shrink; membership never grows past the group.
type admission struct {
	self     string
	rejected *rejections

	mu sync.RWMutex
	// nodes maps each Node of the group to its InternalIP (nil: any
	// address, the Node reports none yet).
	nodes map[string]net.IP
}

// NotifyAlive implements memberlist.AliveDelegate: an alive message about
// a member that is not a Node of the group, or at another address than its
// Node's, is ignored (memberlist never adds the member).
func (a *admission) NotifyAlive(n *memberlist.Node) error {
	if n.Name == a.self {
		return nil
	}
	a.mu.RLock()
	ip, ok := a.nodes[n.Name]
	a.mu.RUnlock()
	switch {
	case !ok:
		a.rejected.of(RejectedMember).Add(1)
		return fmt.Errorf("%q is not a Node of the group", n.Name)
	case ip != nil && !ip.Equal(n.Addr):
		a.rejected.of(RejectedMember).Add(1)
		return fmt.Errorf("%q is announced at %s, not at its Node's InternalIP %s", n.Name, n.Addr, ip)
	}
	return nil
}

// NotifyMerge implements memberlist.MergeDelegate: a push/pull listing
// more members than twice the group (and a margin for Nodes coming and
// going) is refused before any of them is looked at.
func (a *admission) NotifyMerge(peers []*memberlist.Node) error {
	a.mu.RLock()
	limit := 2*len(a.nodes) + 8
	a.mu.RUnlock()
	if len(peers) > limit {
		a.rejected.of(RejectedMerge).Add(1)
		return fmt.Errorf("a push/pull of %d members, more than the group could hold (%d)", len(peers), limit)
	}
	return nil
}

// allowed reports whether ip is the InternalIP of a Node of the group.
func (a *admission) allowed(ip net.IP) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, n := range a.nodes {
		if n != nil && n.Equal(ip) {
			return true
		}
	}
	return false
}

// set replaces the group's Nodes.
func (a *admission) set(nodes map[string]string) {
	m := make(map[string]net.IP, len(nodes))
	for name, addr := range nodes {
		m[name] = net.ParseIP(addr)
	}
	a.mu.Lock()
	a.nodes = m
	a.mu.Unlock()
}

// undecryptable reports whether a memberlist log line says a message was
// dropped for want of the key.
func undecryptable(line string) bool {
	line = strings.ToLower(line)
	for _, s := range []string{"decrypt", "encryption is configured but remote state is not encrypted"} {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}
