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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/agents/fencing-agent/gossipkey"
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
	// KeyDir is the group's gossip keyring, the Secret
	// deckhousev1.FencingGossipKeySecretPrefix+<group> as the kubelet
	// mounts it (gossipkey.Load). Every message is encrypted and
	// authenticated (AES-GCM, the group's label as additional data) with
	// it; without a readable keyring the agent does not gossip at all.
	KeyDir string
}

// Gossip is this agent's membership in its group's gossip. Each member
// also publishes one fact in its memberlist metadata: whether its own last
// check reached the API. A member without the API keeps its watchdog fed
// only while a majority of its group is alive AND without the API too
// (the control plane is down for all of them); a member whose peers still
// reach the API is the one cut off (CutOffFromAPI).
type Gossip struct {
	cfg     Config
	joined  atomic.Bool
	meta    *apiMeta
	members *members
	// admit bounds membership to the group's Nodes and their addresses;
	// rejected counts what it and the transport refused.
	admit    *admission
	rejected *rejections

	// mu guards ml (nil until a keyring was read) and the keyring state.
	mu     sync.Mutex
	ml     *memberlist.Memberlist
	ring   *memberlist.Keyring
	keys   gossipkey.Keys
	keyErr error
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

// New prepares this agent's membership; nothing listens until Join has
// read the group's keyring.
func New(cfg Config) *Gossip {
	// A member starts as reaching the API: it arms only after it did.
	meta := &apiMeta{}
	meta.reached.Store(true)
	rejected := &rejections{}
	return &Gossip{cfg: cfg, meta: meta, members: &members{apiReached: map[string]bool{}},
		admit: &admission{self: cfg.Name, rejected: rejected, nodes: map[string]net.IP{}}, rejected: rejected}
}

// SetGroup tells the gossip the group's Nodes and their InternalIPs (""
// when a Node reports none): only they are admitted as members, at their
// address, and only their addresses may send. The agent calls it with its
// informer's view, which an API outage does not shrink.
func (g *Gossip) SetGroup(nodes map[string]string) { g.admit.set(nodes) }

// Rejected is how many messages or members were refused for reason (one
// of RejectedReasons) since start.
func (g *Gossip) Rejected(reason string) uint64 { return g.rejected.of(reason).Load() }

// Start is New and the first Join's start without peers: it fails when the
// keyring cannot be read or the port bound.
func Start(cfg Config) (*Gossip, error) {
	g := New(cfg)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refreshKeysLocked(); err != nil {
		return nil, err
	}
	return g, nil
}

// refreshKeysLocked reads the keyring again and starts the gossip the
// first time it reads one. A keyring that cannot be read is an error the
// agent reports (KeyError); once running, the gossip keeps the last
// keyring it read, and never falls back to plain text.
func (g *Gossip) refreshKeysLocked() error {
	keys, err := gossipkey.Load(g.cfg.KeyDir)
	if err != nil {
		if g.keyErr == nil || g.keyErr.Error() != err.Error() {
			if g.ml == nil {
				klog.ErrorS(err, "Not gossiping: the group's gossip keyring cannot be read; this agent will not join its group or arm until it can", "group", g.cfg.Group)
			} else {
				klog.ErrorS(err, "The group's gossip keyring cannot be read again; gossiping with the keys read last", "group", g.cfg.Group, "keyring", g.keys.Fingerprint())
			}
		}
		g.keyErr = err
		return err
	}
	g.keyErr = nil
	if g.ml == nil {
		if err := g.startLocked(keys); err != nil {
			g.keyErr = err
			return err
		}
		g.keys = keys
		klog.InfoS("Gossiping encrypted with the group's keyring", "group", g.cfg.Group, "keyring", keys.Fingerprint())
		return nil
	}
	if keys.Equal(g.keys) {
		return nil
	}
	// Accept the new keys first, then encrypt with the primary, then drop
	// what the keyring no longer holds.
	ring := g.ring
	for _, k := range keys.All() {
		if err := ring.AddKey(k); err != nil {
			return fmt.Errorf("installing a gossip key of group %s: %w", g.cfg.Group, err)
		}
	}
	if err := ring.UseKey(keys.Primary); err != nil {
		return fmt.Errorf("switching the primary gossip key of group %s: %w", g.cfg.Group, err)
	}
	for _, old := range g.keys.All() {
		if !slices.ContainsFunc(keys.All(), func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := ring.RemoveKey(old); err != nil {
				return fmt.Errorf("removing an old gossip key of group %s: %w", g.cfg.Group, err)
			}
		}
	}
	klog.InfoS("The group's gossip keyring changed", "group", g.cfg.Group, "from", g.keys.Fingerprint(), "to", keys.Fingerprint())
	g.keys = keys
	return nil
}

// startLocked listens for gossip, encrypted with keys.
func (g *Gossip) startLocked(keys gossipkey.Keys) error {
	cfg := g.cfg
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
	ring, err := memberlist.NewKeyring(keys.All(), keys.Primary)
	if err != nil {
		return fmt.Errorf("the gossip keyring of group %s: %w", cfg.Group, err)
	}
	// Encrypted and authenticated both ways: a message without the key, or
	// in the clear, is dropped.
	mc.Keyring = ring
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	logger := log.New(klogWriter{rejected: g.rejected}, "", 0)
	mc.Logger = logger
	mc.Delegate = g.meta
	mc.Events = g.members
	// Membership is bounded by the group: unknown names and push/pulls
	// larger than the group are refused, and only the group's Nodes may
	// send at all.
	mc.Alive = g.admit
	mc.Merge = g.admit
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{cfg.BindAddr}, BindPort: cfg.Port, Logger: logger})
	if err != nil {
		return fmt.Errorf("listening for the gossip of group %s on %s: %w", cfg.Group, net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port)), err)
	}
	mc.Transport = newFiltered(nt, net.ParseIP(cfg.BindAddr), g.admit, g.rejected)
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = mc.Transport.Shutdown()
		return fmt.Errorf("starting gossip for group %s on %s: %w", cfg.Group, net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port)), err)
	}
	g.ml, g.ring = ml, ring
	return nil
}

// KeyError is why the keyring could not be read last time (nil when it
// was): before the first keyring the agent does not gossip, after it the
// gossip goes on with the keys read last.
func (g *Gossip) KeyError() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.keyErr
}

// Keyring is the fingerprint of the keyring in use ("" before the first).
func (g *Gossip) Keyring() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ml == nil {
		return ""
	}
	return g.keys.Fingerprint()
}

// list is the running memberlist, or nil before a keyring was read.
func (g *Gossip) list() *memberlist.Memberlist {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ml
}

// SetAPIReached publishes whether this member's last check reached the
// API; a change is gossiped to the group at once.
func (g *Gossip) SetAPIReached(reached bool) {
	if g.meta.reached.Swap(reached) == reached {
		return
	}
	ml := g.list()
	if ml == nil {
		return
	}
	if err := ml.UpdateNode(g.cfg.ProbeInterval + time.Second); err != nil {
		klog.V(2).InfoS("Publishing the API state to the group's gossip", "group", g.cfg.Group, "apiReached", reached, "err", err)
	}
}

// AliveWithoutAPI is the names of the alive members whose last published
// check did not reach the API, this member included when its own did not.
func (g *Gossip) AliveWithoutAPI() []string { return g.members.names(true) }

// Join reads the group's keyring again (starting the gossip the first time
// it can), then contacts every peer (host:port) that is not an alive
// member yet. The first call that gossips marks the agent joined whatever
// it reached: the first agent of a group finds nobody, and the others join
// it later. Later calls re-join peers the gossip lost (memberlist never
// contacts a member it declared dead again, so after a partition heals
// someone must). Without a keyring it contacts nobody and the agent stays
// unjoined (KeyError says why).
func (g *Gossip) Join(peers []string) int {
	g.mu.Lock()
	_ = g.refreshKeysLocked()
	ml := g.ml
	g.mu.Unlock()
	if ml == nil {
		return 0
	}
	alive := map[string]bool{}
	for _, m := range ml.Members() {
		if m.State == memberlist.StateAlive {
			alive[m.Address()] = true
		}
	}
	self := ml.LocalNode().Address()
	var todo []string
	for _, p := range peers {
		if p != self && !alive[p] {
			todo = append(todo, p)
		}
	}
	n := 0
	if len(todo) > 0 {
		var err error
		n, err = ml.Join(todo)
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
func (g *Gossip) Address() string {
	if ml := g.list(); ml != nil {
		return ml.LocalNode().Address()
	}
	return net.JoinHostPort(g.cfg.BindAddr, strconv.Itoa(g.cfg.Port))
}

// Leave tells the peers this agent is going (so they do not wait for a
// suspicion to expire) and stops gossiping.
func (g *Gossip) Leave(timeout time.Duration) {
	ml := g.list()
	if ml == nil {
		return
	}
	if err := ml.Leave(timeout); err != nil {
		klog.V(2).InfoS("Leaving the gossip", "group", g.cfg.Group, "err", err)
	}
	if err := ml.Shutdown(); err != nil {
		klog.V(2).InfoS("Stopping the gossip", "group", g.cfg.Group, "err", err)
	}
}

// klogWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// klog lines: errors and warnings always, the rest at -v=4. Messages
// dropped for want of the key, and members refused, are counted and
// logged at -v=2 only: an attacker must not flood the log.
type klogWriter struct{ rejected *rejections }

func (w klogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	switch {
	case undecryptable(line):
		w.rejected.of(RejectedKey).Add(1)
		klog.V(2).InfoS("Gossip", "message", line)
	case strings.Contains(line, "ignoring alive message") || strings.Contains(line, "more than the group could hold"):
		klog.V(2).InfoS("Gossip", "message", line)
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
