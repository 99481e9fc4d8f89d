// Package membership is how the fencing agents of one node group see each
// other without the Kubernetes API: a gossip membership (HashiCorp
// memberlist, SWIM with Lifeguard, as Deckhouse's second generation chose)
// per group, and the quorum rule that turns "how many of my group do I see
// alive" into "am I the one cut off" (QuorumOf).
//
// Why it exists: an agent that only checks the API cannot tell "I am cut
// off" from "the control plane is down", and with the control plane down
// every node of the cluster would stop feeding its watchdog and reset.
// With gossip, nodes that still see a majority of their group keep
// feeding; only a minority, cut off from the API as well, stops.
package membership

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/klog/v2"
)

// Config says where this agent gossips.
type Config struct {
	// Name is the member's name: its Node's name.
	Name string
	// Group is the node group; it is the memberlist label, so agents of
	// another group that reach this port are refused.
	Group string
	// BindAddr and Port are where it listens (TCP and UDP).
	BindAddr string
	Port     int
	// AdvertiseAddr is the address peers reach it at; empty means the
	// address memberlist picks from BindAddr.
	AdvertiseAddr string
	// ProbeInterval is how often a random member is probed; a member that
	// stops answering is suspected after a probe and declared dead after
	// the suspicion timeout (a few probe intervals).
	ProbeInterval time.Duration
}

// Gossip is this agent's membership in its group's gossip. Each member
// also publishes one fact in its memberlist metadata: whether its own last
// check reached the API. A member without the API keeps its watchdog fed
// only while a majority of its group is alive AND without the API too
// (the control plane is down for all of them); a member whose peers still
// reach the API is the one cut off (CutOffFromAPI).
type Gossip struct {
	cfg     Config
	ml      *memberlist.Memberlist
	joined  atomic.Bool
	meta    *apiMeta
	members *members
}

// members is this agent's copy of the group's membership, kept by
// memberlist's event callbacks: memberlist calls them under its own lock,
// while the *Node values Members returns are its live state, which it
// rewrites as gossip arrives (reading their fields would race).
type members struct {
	mu sync.Mutex
	// apiReached holds the members not known to be dead or gone, each
	// with the API state it last published.
	apiReached map[string]bool
}

func (s *members) set(n *memberlist.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiReached[n.Name] = !(len(n.Meta) == 1 && n.Meta[0] == metaAPIUnreached)
}

func (s *members) NotifyJoin(n *memberlist.Node)   { s.set(n) }
func (s *members) NotifyUpdate(n *memberlist.Node) { s.set(n) }
func (s *members) NotifyLeave(n *memberlist.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.apiReached, n.Name)
}

// names lists the members, or only those whose last published check did
// not reach the API.
func (s *members) names(withoutAPIOnly bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, reached := range s.apiReached {
		if !withoutAPIOnly || !reached {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Metadata values: one byte, so it never nears memberlist's meta limit.
const (
	metaAPIReached   = 'A'
	metaAPIUnreached = 'C'
)

// apiMeta is the memberlist Delegate that publishes this member's API
// state; the other Delegate hooks carry nothing.
type apiMeta struct{ reached atomic.Bool }

func (d *apiMeta) NodeMeta(int) []byte {
	if d.reached.Load() {
		return []byte{metaAPIReached}
	}
	return []byte{metaAPIUnreached}
}
func (*apiMeta) NotifyMsg([]byte)                {}
func (*apiMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (*apiMeta) LocalState(bool) []byte          { return nil }
func (*apiMeta) MergeRemoteState([]byte, bool)   {}

// Start listens for gossip; Join then contacts the peers.
func Start(cfg Config) (*Gossip, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.Label = cfg.Group
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.Port
	mc.AdvertisePort = cfg.Port
	if cfg.AdvertiseAddr != "" {
		mc.AdvertiseAddr = cfg.AdvertiseAddr
	}
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
		mc.ProbeTimeout = cfg.ProbeInterval / 2
		mc.GossipInterval = cfg.ProbeInterval / 5
	}
	mc.Logger = log.New(klogWriter{}, "", 0)
	// A member starts as reaching the API: it arms only after it did.
	meta := &apiMeta{}
	meta.reached.Store(true)
	mc.Delegate = meta
	ms := &members{apiReached: map[string]bool{}}
	mc.Events = ms
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("starting gossip for group %s on %s: %w", cfg.Group, net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port)), err)
	}
	return &Gossip{cfg: cfg, ml: ml, meta: meta, members: ms}, nil
}

// SetAPIReached publishes whether this member's last check reached the
// API; a change is gossiped to the group at once.
func (g *Gossip) SetAPIReached(reached bool) {
	if g.meta.reached.Swap(reached) == reached {
		return
	}
	if err := g.ml.UpdateNode(g.cfg.ProbeInterval + time.Second); err != nil {
		klog.V(2).InfoS("Publishing the API state to the group's gossip", "group", g.cfg.Group, "apiReached", reached, "err", err)
	}
}

// AliveWithoutAPI is the names of the alive members whose last published
// check did not reach the API, this member included when its own did not.
func (g *Gossip) AliveWithoutAPI() []string { return g.members.names(true) }

// Join contacts every peer (host:port) that is not an alive member yet.
// The first call marks the agent joined whatever it reached: the first
// agent of a group finds nobody, and the others join it later. Later
// calls re-join peers the gossip lost (memberlist never contacts a member
// it declared dead again, so after a partition heals someone must).
func (g *Gossip) Join(peers []string) int {
	alive := map[string]bool{}
	for _, m := range g.ml.Members() {
		if m.State == memberlist.StateAlive {
			alive[m.Address()] = true
		}
	}
	self := g.ml.LocalNode().Address()
	var todo []string
	for _, p := range peers {
		if p != self && !alive[p] {
			todo = append(todo, p)
		}
	}
	n := 0
	if len(todo) > 0 {
		var err error
		n, err = g.ml.Join(todo)
		if err != nil {
			klog.V(2).InfoS("Some gossip peers did not answer", "group", g.cfg.Group, "contacted", n, "tried", len(todo), "err", err)
		}
	}
	if !g.joined.Swap(true) {
		klog.InfoS("Joined the group's gossip", "group", g.cfg.Group, "address", self, "peersContacted", n, "peersKnown", len(peers))
	}
	return n
}

// Joined reports whether the first Join has run.
func (g *Gossip) Joined() bool { return g.joined.Load() }

// Alive is the names of the members this agent sees alive, itself
// included: every member memberlist has not declared dead or gone (a
// suspected member counts until its suspicion expires, a few probe
// intervals). Keeping a watchdog fed without the API needs more than this:
// a majority that has lost the API too (AliveWithoutAPI), which a node cut
// off alone never sees, whatever it still believes of its peers.
func (g *Gossip) Alive() []string { return g.members.names(false) }

// Address is where peers reach this agent (host:port).
func (g *Gossip) Address() string { return g.ml.LocalNode().Address() }

// Leave tells the peers this agent is going (so they do not wait for a
// suspicion to expire) and stops gossiping.
func (g *Gossip) Leave(timeout time.Duration) {
	if err := g.ml.Leave(timeout); err != nil {
		klog.V(2).InfoS("Leaving the gossip", "group", g.cfg.Group, "err", err)
	}
	if err := g.ml.Shutdown(); err != nil {
		klog.V(2).InfoS("Stopping the gossip", "group", g.cfg.Group, "err", err)
	}
}

// klogWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// klog lines: errors and warnings always, the rest at -v=4.
type klogWriter struct{}

func (klogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	switch {
	case bytes.Contains(p, []byte("[ERR]")):
		klog.ErrorS(nil, "Gossip", "message", line)
	case bytes.Contains(p, []byte("[WARN]")):
		klog.InfoS("Gossip", "message", line)
	default:
		klog.V(4).InfoS("Gossip", "message", line)
	}
	return len(p), nil
}

var _ io.Writer = klogWriter{}
