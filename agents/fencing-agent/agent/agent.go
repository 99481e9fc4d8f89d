// Package agent is the fencing agent's loop. Every feed interval it
// looks at its own Node (maintenance), asks the API for it (does the API
// answer?), counts the members of its group it sees over gossip (quorum),
// and acts on Decide: arm, feed, stop feeding, or disarm.
//
// The label node-manager.deckhouse.io/fencing-enabled on the Node is the
// agent's promise to the fencing controller that the watchdog is armed:
// it is set only after the device is open (if it cannot be set, the
// device is closed again), and removed before the device is closed.
//
// The group's expected membership N, which the quorum is a majority of,
// is the number of Nodes labelled with the group in the agent's view of
// the API. The view is an informer cache, so while the API is down N is
// what it last was: a partition cannot shrink it.
package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/node-manager/node-manager/agents/fencing-agent/membership"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Config is what the agent is told.
type Config struct {
	// NodeName and Group are the node the agent runs on and its group.
	NodeName, Group string
	// Mode is deckhousev1.FencingModeWatchdog or FencingModeNotify.
	Mode string
	// FeedInterval is the loop's period: each tick checks the API and
	// feeds. It must be well inside the watchdog's timeout.
	FeedInterval time.Duration
	// APITimeout bounds each check of the API; shorter than FeedInterval.
	APITimeout time.Duration
	// LeaseStaleAfter is the age of the node's kube-node-lease Lease
	// beyond which the agent stops feeding though the API answers: the
	// kubelet is not renewing it, so the fencing controller will free the
	// node's pods, and the watchdog must have fired by then
	// (deckhousev1.DefaultFencingAgentLeaseStaleAfter).
	LeaseStaleAfter time.Duration
	// RejoinInterval is how often peers the gossip lost are contacted again.
	RejoinInterval time.Duration
	// Peers are gossip addresses (host:port) given on the command line;
	// the InternalIP of each of the group's Nodes at GossipPort is added.
	Peers      []string
	GossipPort int
}

// Device is the watchdog (watchdog.Device, or in Notify mode NoDevice).
type Device interface {
	Arm() error
	Feed() error
	Disarm() error
	Armed() bool
}

// Gossip is the group's membership (membership.Gossip).
type Gossip interface {
	Join(peers []string) int
	Joined() bool
	Alive() []string
	AliveWithoutAPI() []string
	SetAPIReached(reached bool)
	Leave(timeout time.Duration)
	// KeyError is why the group's gossip keyring could not be read last
	// time (nil when it was); Keyring is the fingerprint of the keyring in
	// use ("" before the first).
	KeyError() error
	Keyring() string
	// SetGroup is the group's Nodes and their InternalIPs: the only
	// members, and the only senders, the gossip admits.
	SetGroup(nodes map[string]string)
	// Rejected counts what the gossip refused, by reason
	// (membership.RejectedReasons).
	Rejected(reason string) uint64
}

// Agent is one node's fencing agent.
type Agent struct {
	cfg      Config
	kube     kubernetes.Interface
	dev      Device
	gossip   Gossip
	recorder events.EventRecorder
	clock    clock.WithTicker
	metrics  *metrics

	own, group         informers.SharedInformerFactory
	ownNodes, grpNodes corelisters.NodeLister
	synced             []cache.InformerSynced

	// started is when the agent was made; leaseReadAt when the node's
	// Lease was last read (zero before the first read). Tick alone uses
	// them.
	started     time.Time
	leaseReadAt time.Time

	mu       sync.Mutex
	status   Status
	lastFeed time.Time
	lastTick time.Time
}

// Status is what /readyz and the logs report.
type Status struct {
	State
	Decision
	Synced        bool
	Joined        bool
	MembersAlive  int
	MembersWanted int
	// KeyError is why the gossip keyring cannot be read (nil when it can).
	KeyError error
	// Maintenance names the annotation that put the node in maintenance.
	MaintenanceAnnotation string
}

// New wires the agent: its own Node is watched by name (field selector),
// the group's Nodes by the restricted group label
// (deckhousev1.NodeGroupRestrictedLabel), which node-manager-controller
// sets from each node's Instance and no kubelet can write: a node that
// labelled itself into the group (node.deckhouse.io/group) is not admitted
// to its gossip, not contacted, and not counted in its quorum.
func New(cfg Config, kube kubernetes.Interface, dev Device, gossip Gossip, recorder events.EventRecorder, clk clock.WithTicker) *Agent {
	own := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
	}))
	group := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{deckhousev1.NodeGroupRestrictedLabel: cfg.Group}.String()
	}))
	ownInf, grpInf := own.Core().V1().Nodes(), group.Core().V1().Nodes()
	a := &Agent{
		cfg: cfg, kube: kube, dev: dev, gossip: gossip, recorder: recorder, clock: clk, started: clk.Now(),
		own: own, group: group, ownNodes: ownInf.Lister(), grpNodes: grpInf.Lister(),
		synced: []cache.InformerSynced{ownInf.Informer().HasSynced, grpInf.Informer().HasSynced},
	}
	// Read at scrape time, through a: the gossip's counters as they are then.
	a.metrics = newMetrics(a.LastFeed, clk.Now, func(reason string) uint64 { return a.gossip.Rejected(reason) })
	return a
}

// Collectors are the agent's metrics.
func (a *Agent) Collectors() []prometheus.Collector { return a.metrics.Collectors() }

// LastFeed is when the watchdog was last fed (zero before the first feed).
func (a *Agent) LastFeed() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastFeed
}

// Status is the state of the last tick.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// Run runs the loop until ctx ends, then removes the label and disarms
// (the DaemonSet's pod is going away: a SIGTERM, a rollout, a drain).
func (a *Agent) Run(ctx context.Context) error {
	a.own.Start(ctx.Done())
	a.group.Start(ctx.Done())
	go a.rejoin(ctx)

	ticker := a.clock.NewTicker(a.cfg.FeedInterval)
	defer ticker.Stop()
	for {
		a.Tick(ctx)
		select {
		case <-ctx.Done():
			a.shutdown()
			return nil
		case <-ticker.C():
		}
	}
}

// rejoin joins the group's gossip at once (the first join makes the agent
// ready), then again every RejoinInterval: memberlist never contacts a
// member it declared dead again, so after a partition heals the agents
// must find each other. It runs beside the loop, since a join to peers
// that do not answer can take seconds and must never delay a feed.
func (a *Agent) rejoin(ctx context.Context) {
	for {
		if cache.WaitForCacheSync(ctx.Done(), a.synced...) {
			a.gossip.SetGroup(a.groupAddresses())
			a.gossip.Join(a.peers())
		}
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.RejoinInterval):
		}
	}
}

// peers are the command line's peers and the InternalIP of each of the
// group's Nodes at the gossip port.
func (a *Agent) peers() []string {
	peers := append([]string{}, a.cfg.Peers...)
	nodes, _ := a.grpNodes.List(labels.Everything())
	for _, n := range nodes {
		if n.Name == a.cfg.NodeName {
			continue
		}
		for _, addr := range n.Status.Addresses {
			if addr.Type == corev1.NodeInternalIP {
				peers = append(peers, net.JoinHostPort(addr.Address, strconv.Itoa(a.cfg.GossipPort)))
				break
			}
		}
	}
	return peers
}

// groupAddresses maps each of the group's Nodes (this one included) to its
// InternalIP ("" when it reports none): the members the gossip admits.
// While the API is down the cache keeps its last view.
func (a *Agent) groupAddresses() map[string]string {
	out := map[string]string{a.cfg.NodeName: ""}
	nodes, _ := a.grpNodes.List(labels.Everything())
	for _, n := range nodes {
		out[n.Name] = ""
		for _, addr := range n.Status.Addresses {
			if addr.Type == corev1.NodeInternalIP {
				out[n.Name] = addr.Address
				break
			}
		}
	}
	return out
}

// expectedMembers is the group's expected membership N: its Nodes that
// carry the fencing-enabled label (their agents are armed), and this node.
// The fencing controller counts the same Nodes when it decides whether a
// majority of the group went silent together, so the two sides agree on
// what a majority is: a node disarmed for maintenance counts on neither.
// While the API is down the cache keeps its last view, so a partition
// cannot shrink N.
func (a *Agent) expectedMembers() map[string]bool {
	expected := map[string]bool{a.cfg.NodeName: true}
	nodes, _ := a.grpNodes.List(labels.Everything())
	for _, n := range nodes {
		if _, armed := n.Labels[deckhousev1.FencingEnabledLabel]; armed {
			expected[n.Name] = true
		}
	}
	return expected
}

// Tick is one turn of the loop; Run calls it every FeedInterval.
func (a *Agent) Tick(ctx context.Context) {
	synced := true
	for _, s := range a.synced {
		synced = synced && s()
	}
	node, answered, lease := a.checkAPI(ctx)
	if node == nil {
		node, _ = a.ownNodes.Get(a.cfg.NodeName)
	}
	expected := a.expectedMembers()
	a.gossip.SetAPIReached(answered)
	listed := a.gossip.Alive()
	alive := membership.CountAlive(a.cfg.NodeName, listed, expected)
	cutOff := membership.CountAlive(a.cfg.NodeName, a.gossip.AliveWithoutAPI(), expected)
	maint := InMaintenance(node)
	s := State{
		Ready:        synced && a.gossip.Joined(),
		Armed:        a.dev.Armed(),
		Maintenance:  maint != "",
		APIAnswered:  answered,
		LeaseStale:   answered && lease.stale(a.cfg.LeaseStaleAfter, !a.leaseReadAt.IsZero()),
		LeaseAge:     lease.ageOrUnread(),
		LeaseUnread:  lease.unread,
		LeaseError:   lease.err,
		Quorum:       membership.QuorumOf(alive, len(expected)),
		OutageQuorum: membership.QuorumOf(cutOff, len(expected)),
	}
	d := Decide(s)
	a.act(ctx, d, node)
	if answered {
		a.reportKeyring(ctx, node)
	}

	a.mu.Lock()
	prev := a.status
	a.status = Status{State: s, Decision: d, Synced: synced, Joined: a.gossip.Joined(),
		MembersAlive: alive, MembersWanted: len(expected), MaintenanceAnnotation: maint, KeyError: a.gossip.KeyError()}
	a.status.Armed = a.dev.Armed()
	a.lastTick = a.clock.Now()
	a.mu.Unlock()
	a.logTransition(prev, a.Status())

	a.metrics.armed.Set(boolGauge(a.dev.Armed()))
	a.metrics.apiReachable.Set(boolGauge(answered))
	a.metrics.maintenance.Set(boolGauge(maint != ""))
	a.metrics.membersAlive.Set(float64(alive))
	a.metrics.membersListed.Set(float64(len(listed)))
	a.metrics.membersWant.Set(float64(len(expected)))
	a.metrics.setQuorum(s.Quorum)
	a.metrics.keyringReadable.Set(boolGauge(a.status.KeyError == nil))
}

// checkAPI GETs the agent's own Node and, when that succeeds, its node's
// Lease, within APITimeout. It returns the Node (nil when the API did not
// give it), whether the API answered, and what is known of the Lease.
func (a *Agent) checkAPI(ctx context.Context) (*corev1.Node, bool, leaseCheck) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.APITimeout)
	defer cancel()
	node, err := a.kube.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		klog.V(2).InfoS("API check", "node", a.cfg.NodeName, "answered", Answered(err), "err", err)
		return nil, Answered(err), a.leaseUnread(fmt.Errorf("reading Node %s: %w", a.cfg.NodeName, err))
	}
	lease, err := a.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// No Lease: the fencing controller never fences such a node.
		a.leaseReadAt = a.clock.Now()
		return node, true, leaseCheck{}
	case err != nil:
		klog.ErrorS(err, "Cannot read the node's Lease; once it has been unread for --lease-stale-after the agent stops feeding, as for a stale one",
			"node", a.cfg.NodeName, "namespace", corev1.NamespaceNodeLease, "lastRead", a.leaseReadAt)
		return node, true, a.leaseUnread(fmt.Errorf("reading Lease %s/%s: %w", corev1.NamespaceNodeLease, a.cfg.NodeName, err))
	}
	a.leaseReadAt = a.clock.Now()
	if lease.Spec.RenewTime == nil {
		return node, true, leaseCheck{}
	}
	return node, true, leaseCheck{age: max(a.clock.Since(lease.Spec.RenewTime.Time), 0)}
}

// leaseCheck is what one tick knows of the node's Lease.
type leaseCheck struct {
	// age is how long ago the kubelet last renewed it, as read this tick
	// (0 without a Lease, or when it was not read).
	age time.Duration
	// unread: it could not be read this tick, for unreadFor since the last
	// successful read (since the agent started when it never was), and
	// err says why.
	unread    bool
	unreadFor time.Duration
	err       error
}

// leaseUnread is the leaseCheck of a tick that could not read the Lease.
func (a *Agent) leaseUnread(err error) leaseCheck {
	since := a.leaseReadAt
	if since.IsZero() {
		since = a.started
	}
	return leaseCheck{unread: true, unreadFor: max(a.clock.Since(since), 0), err: err}
}

// ageOrUnread is the age the decision reports: how long ago the kubelet
// renewed the Lease, or how long it has gone unread.
func (l leaseCheck) ageOrUnread() time.Duration {
	if l.unread {
		return l.unreadFor
	}
	return l.age
}

// stale is whether the Lease counts as stale: renewed longer than limit
// ago, or unread for longer than limit (a Lease the agent cannot read —
// RBAC drift, 429, 5xx — proves nothing about the kubelet, while the
// fencing controller, which reads it, frees the node's pods once the
// kubelet stops renewing it), or never read at all (an agent that never
// saw its kubelet renew does not promise anything about it).
func (l leaseCheck) stale(limit time.Duration, everRead bool) bool {
	if l.unread {
		return !everRead || l.unreadFor > limit
	}
	return l.age > limit
}

// act carries a decision out.
func (a *Agent) act(ctx context.Context, d Decision, node *corev1.Node) {
	switch d.Action {
	case Arm:
		if err := a.dev.Arm(); err != nil {
			klog.ErrorS(err, "Cannot arm the watchdog", "node", a.cfg.NodeName)
			return
		}
		if err := a.patchLabels(ctx, true); err != nil {
			// The promise cannot be made, so nothing may be armed.
			klog.ErrorS(err, "Armed the watchdog but cannot label the Node; disarming", "node", a.cfg.NodeName)
			if derr := a.dev.Disarm(); derr != nil {
				klog.ErrorS(derr, "Cannot disarm the watchdog", "node", a.cfg.NodeName)
			}
			return
		}
		klog.InfoS("Armed the watchdog and labelled the Node", "node", a.cfg.NodeName, "mode", a.cfg.Mode, "label", deckhousev1.FencingEnabledLabel)
		a.event(corev1.EventTypeNormal, "FencingArmed", "Arm",
			fmt.Sprintf("fencing-agent armed the node's watchdog (mode %s); it is fed while the API answers or a majority of group %s is seen", a.cfg.Mode, a.cfg.Group))
		a.feed()
	case Feed:
		a.feed()
	case Starve:
		a.metrics.feeding.Set(0)
	case Disarm:
		if err := a.patchLabels(ctx, false); err != nil {
			// The label must go first; until it does, the promise stands
			// and the watchdog is fed.
			klog.ErrorS(err, "Cannot remove the fencing label before disarming; feeding and retrying", "node", a.cfg.NodeName)
			a.feed()
			return
		}
		if err := a.dev.Disarm(); err != nil {
			klog.ErrorS(err, "Cannot disarm the watchdog", "node", a.cfg.NodeName)
		}
		a.metrics.feeding.Set(0)
		klog.InfoS("Disarmed the watchdog", "node", a.cfg.NodeName, "reason", d.Reason, "annotation", InMaintenance(node))
		a.event(corev1.EventTypeNormal, "FencingDisarmed", "Disarm",
			fmt.Sprintf("fencing-agent disarmed the node's watchdog: maintenance (%s)", InMaintenance(node)))
	case Wait:
		a.metrics.feeding.Set(0)
		// A label left by an agent that died armed is a promise nobody
		// keeps: remove it while the API answers.
		if node != nil && !a.dev.Armed() {
			if _, ok := node.Labels[deckhousev1.FencingEnabledLabel]; ok {
				if err := a.patchLabels(ctx, false); err != nil {
					klog.V(2).InfoS("Cannot remove a stale fencing label", "node", a.cfg.NodeName, "err", err)
				}
			}
		}
	}
}

func (a *Agent) feed() {
	if err := a.dev.Feed(); err != nil {
		klog.ErrorS(err, "Cannot feed the watchdog", "node", a.cfg.NodeName)
		a.metrics.feeding.Set(0)
		return
	}
	a.mu.Lock()
	a.lastFeed = a.clock.Now()
	a.mu.Unlock()
	a.metrics.feeds.Inc()
	a.metrics.feeding.Set(1)
}

// reportKeyring writes the fingerprint of the gossip keyring in use (never
// a key) on the agent's Node when it changed, so node-manager-controller
// knows when every agent holds the Secret's current keyring and a key
// rotation may take its next step.
func (a *Agent) reportKeyring(ctx context.Context, node *corev1.Node) {
	fp := a.gossip.Keyring()
	if node == nil || fp == "" || node.Annotations[deckhousev1.FencingGossipKeyringAnnotation] == fp {
		return
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{deckhousev1.FencingGossipKeyringAnnotation: fp}}})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.APITimeout)
	defer cancel()
	if _, err := a.kube.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: deckhousev1.FencingAgentName}); err != nil {
		klog.ErrorS(err, "Cannot report the gossip keyring on the Node; a key rotation waits for it", "node", a.cfg.NodeName, "keyring", fp)
	}
}

// patchLabels sets (armed) or removes the fencing-enabled label; setting
// it also sets the mode label. Only these two labels change: the
// admission policy d8-node-manager-fencing-agent-own-node refuses the
// agent anything else.
func (a *Agent) patchLabels(ctx context.Context, armed bool) error {
	set := map[string]any{deckhousev1.FencingEnabledLabel: nil}
	if armed {
		set = map[string]any{deckhousev1.FencingEnabledLabel: "", deckhousev1.FencingModeLabel: a.cfg.Mode}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": set}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.APITimeout)
	defer cancel()
	_, err = a.kube.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: deckhousev1.FencingAgentName})
	if err != nil {
		return fmt.Errorf("patching the fencing labels of Node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// shutdown removes the label, then disarms, and leaves the gossip.
func (a *Agent) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*a.cfg.APITimeout)
	defer cancel()
	if a.dev.Armed() {
		if err := a.patchLabels(ctx, false); err != nil {
			klog.ErrorS(err, "Stopping: cannot remove the fencing label; disarming anyway", "node", a.cfg.NodeName)
		}
		if err := a.dev.Disarm(); err != nil {
			klog.ErrorS(err, "Stopping: cannot disarm the watchdog", "node", a.cfg.NodeName)
		} else {
			klog.InfoS("Stopping: disarmed the watchdog", "node", a.cfg.NodeName)
			a.event(corev1.EventTypeNormal, "FencingDisarmed", "Disarm", "fencing-agent disarmed the node's watchdog: the agent is stopping")
		}
	}
	a.gossip.Leave(time.Second)
}

func (a *Agent) event(eventtype, reason, action, note string) {
	if a.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: a.cfg.NodeName}
	if n, err := a.ownNodes.Get(a.cfg.NodeName); err == nil {
		ref.UID = n.UID
	}
	a.recorder.Eventf(ref, nil, eventtype, reason, action, "%s", note)
}

// logTransition logs when the decision's action or the quorum changes,
// not every tick.
func (a *Agent) logTransition(prev, cur Status) {
	if prev.Action == cur.Action && prev.Quorum == cur.Quorum && prev.APIAnswered == cur.APIAnswered && prev.Reason == cur.Reason {
		return
	}
	kv := []any{"node", a.cfg.NodeName, "group", a.cfg.Group, "action", cur.Action.String(), "reason", cur.Reason,
		"apiAnswered", cur.APIAnswered, "quorum", cur.Quorum.String(), "membersAlive", cur.MembersAlive, "membersExpected", cur.MembersWanted}
	if cur.Action == Starve {
		klog.ErrorS(nil, "Stopped feeding the watchdog: this node is cut off; it will be reset when the watchdog expires", kv...)
		return
	}
	klog.InfoS("Fencing state changed", kv...)
}

// Healthy reports whether the loop has turned lately (within three feed
// intervals and an API timeout).
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastTick.IsZero() {
		return nil
	}
	if late := a.clock.Since(a.lastTick); late > 3*a.cfg.FeedInterval+a.cfg.APITimeout {
		return fmt.Errorf("the loop last turned %s ago", late.Round(time.Second))
	}
	return nil
}

// Ready reports whether the agent is where it should be: joined, synced,
// and armed or deliberately disarmed (maintenance). The message says the
// quorum mode, so a group too small for one says so.
func (a *Agent) Ready() (bool, string) {
	s := a.Status()
	var quorum string
	if s.Quorum == membership.QuorumTooSmall {
		quorum = fmt.Sprintf("; group %s expects %d members, too few for a quorum (%d): API check only", a.cfg.Group, s.MembersWanted, membership.MinQuorumGroup)
	} else {
		quorum = fmt.Sprintf("; %d of %d members of group %s alive (quorum %s)", s.MembersAlive, s.MembersWanted, a.cfg.Group, s.Quorum)
	}
	switch {
	case s.KeyError != nil && !s.Joined:
		return false, "not gossiping: " + s.KeyError.Error() + quorum
	case s.KeyError != nil:
		return false, "gossiping with the keys read last, the group's gossip keyring cannot be read again: " + s.KeyError.Error() + quorum
	case !s.Synced:
		return false, "the Node caches have not synced" + quorum
	case !s.Joined:
		return false, "not joined to the group's gossip yet" + quorum
	case s.Armed:
		return true, fmt.Sprintf("armed (mode %s), %s: %s", a.cfg.Mode, s.Action, s.Reason) + quorum
	case s.Maintenance:
		return true, fmt.Sprintf("disarmed: maintenance (%s)", s.MaintenanceAnnotation) + quorum
	default:
		return false, "not armed: " + s.Reason + quorum
	}
}
