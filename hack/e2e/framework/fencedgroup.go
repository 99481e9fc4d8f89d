package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

// FencedGroup is a fenced NodeGroup of three Nodes, each with its real
// fencing agent as a process: as the fencing-agent ServiceAccount with a
// token bound to a Pod on its node, a FIFO as its watchdog (no real
// watchdog is ever armed), and its own TCP proxy to kube-apiserver that a
// test can cut.
type FencedGroup struct {
	Name, Mode string
	Nodes      []string
	Proxies    []*TCPProxy
	// ServicePaths, with FencedGroupOptions.ServicePath, are each agent's
	// second way to kube-apiserver, the one its kubeconfig names (a pod's
	// Service VIP path); Proxies are then its node's local API proxy,
	// passed as --api-server.
	ServicePaths []*TCPProxy
	Agents       []*stack.FencingAgent
	// Keys are each agent's gossip keyring volume, written from the
	// group's Secret as the node's kubelet would.
	Keys []*GossipKeyVolume
}

// FencedGroupOptions tune StartFencedGroup.
type FencedGroupOptions struct {
	// Mode is spec.fencing.mode; Watchdog when empty.
	Mode string
	// Group changes the NodeGroup before it is created (its watchdog
	// timeout, its type).
	Group func(*deckhousev1.NodeGroup)
	// AgentArgs are added to every agent's command line.
	AgentArgs []string
	// KeysFromController: node-manager-controller runs and makes the
	// group's gossip keyring Secret; otherwise the test makes it.
	KeysFromController bool
	// ServicePath: each agent's kubeconfig names a proxy of its own
	// (ServicePaths, the Service VIP path), and its Proxies entry, the
	// node's local API proxy, is passed as --api-server.
	ServicePath bool
}

// StartFencedGroup creates group name with three Nodes, starts an agent on
// each — every one knows the others' gossip addresses and reaches the API
// through its own proxy — and waits until all three are armed: Node
// labelled, watchdog fed, ready. Everything goes with the test.
func (f *Framework) StartFencedGroup(t *testing.T, name string, opts FencedGroupOptions) *FencedGroup {
	t.Helper()
	ctx := Context(t)
	if opts.Mode == "" {
		opts.Mode = deckhousev1.FencingModeWatchdog
	}
	f.TestGroup(t, NewGroup(name, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: opts.Mode}
		if opts.Group != nil {
			opts.Group(ng)
		}
	}))
	g := &FencedGroup{Name: name, Mode: opts.Mode}
	if !opts.KeysFromController {
		f.EnsureGossipKeySecret(t, name)
	}
	var gossipPorts []int
	for i := range 3 {
		node := fmt.Sprintf("%s-%d", name, i)
		f.TestInstance(t, NewInstance(node, name)) // its group is its Instance's
		// Its restricted group label, which the agents list their group by,
		// as node-manager-controller sets it from the Instance (written
		// here so that the suites that run no controller have it).
		n := NewNode(node, name)
		n.Labels[deckhousev1.NodeGroupRestrictedLabel] = name
		f.TestNode(t, n)
		// Its InternalIP, which its agent's gossip admits (every agent
		// here listens on the loopback address, at its own port), and
		// Ready, as its kubelet would report: a gossip key rotation waits
		// for the agents of Ready nodes. kube-controller-manager writes the
		// new Node too, hence the retry on conflict.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
			_, err = f.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		g.Nodes = append(g.Nodes, node)
		g.Proxies = append(g.Proxies, NewTCPProxy(t, strings.TrimPrefix(f.CP.APIServerURL, "https://")))
		if opts.ServicePath {
			g.ServicePaths = append(g.ServicePaths, NewTCPProxy(t, strings.TrimPrefix(f.CP.APIServerURL, "https://")))
		}
		port, err := controlplane.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		gossipPorts = append(gossipPorts, port)
	}
	for i, node := range g.Nodes {
		token, pod, err := stack.FencingAgentToken(ctx, f.Kube, node)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = f.Kube.CoreV1().Pods(deckhousev1.Namespace).Delete(context.Background(), pod, metav1.DeleteOptions{})
		})
		var peers []string
		for j, p := range gossipPorts {
			if j != i {
				peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p))
			}
		}
		servicePath := ""
		if opts.ServicePath {
			servicePath = g.ServicePaths[i].Addr()
		}
		keys := MountGossipKeys(t, f.Kube, deckhousev1.FencingGossipKeySecretPrefix+name, filepath.Join(f.CP.Dir(), "gossip-key-"+node))
		g.Keys = append(g.Keys, keys)
		a, err := f.Env.StartFencingAgent(ctx, stack.FencingAgentOptions{
			Node: node, Group: name, Mode: opts.Mode, Token: token, APIServer: g.Proxies[i].Addr(), ServicePath: servicePath,
			GossipPort: gossipPorts[i], Peers: peers, GossipKeyDir: keys.Dir, ExtraArgs: opts.AgentArgs,
		})
		if err != nil {
			t.Fatal(err)
		}
		g.Agents = append(g.Agents, a)
		t.Cleanup(func() {
			_ = a.Signal(syscall.SIGCONT) // in case the test froze it
			a.Stop()
		})
	}
	for i := range g.Agents {
		f.WaitArmed(t, g, i)
	}
	return g
}

// WaitArmed waits until agent i of g is ready, its Node labelled and its
// watchdog fed since the last magic close (in Notify mode: labelled and
// ready, with nothing written to the device).
func (f *Framework) WaitArmed(t *testing.T, g *FencedGroup, i int) {
	t.Helper()
	a := g.Agents[i]
	// What was still missing at the last look, for the failure message.
	missing := "nothing looked at yet"
	Poll(t, "agent on "+a.Node+" armed, labelled and feeding", func(ctx context.Context) (bool, error) {
		if a.Exited() {
			return false, a.Failure(fmt.Errorf("exited"))
		}
		code, _, err := a.Readyz(ctx)
		if err != nil || code != 200 {
			missing = fmt.Sprintf("readyz answered %d (%v)", code, err)
			return false, nil
		}
		if !f.Labelled(ctx, g, i) {
			missing = "ready, but its Node has no " + deckhousev1.FencingEnabledLabel + " label"
			return false, nil
		}
		if w := a.Device.Writes(); g.Mode != deckhousev1.FencingModeNotify && (w.Feeds == 0 || w.Last == 'V') {
			missing = fmt.Sprintf("ready and labelled, but the watchdog device has %d feeds, the last %q", w.Feeds, w.Last)
			return false, nil
		}
		return true, nil
	}, func() string { return missing })
}

// Labelled reports whether node i of g carries the fencing-enabled label.
func (f *Framework) Labelled(ctx context.Context, g *FencedGroup, i int) bool {
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, g.Nodes[i], metav1.GetOptions{})
	if err != nil {
		return false
	}
	_, ok := n.Labels[deckhousev1.FencingEnabledLabel]
	return ok
}

// ReadyzSays polls until agent i's /readyz body contains want.
func (g *FencedGroup) ReadyzSays(t *testing.T, i int, want string) {
	t.Helper()
	a := g.Agents[i]
	var last string
	Poll(t, fmt.Sprintf("agent on %s says %q", a.Node, want), func(ctx context.Context) (bool, error) {
		_, body, err := a.Readyz(ctx)
		if err != nil {
			return false, nil
		}
		last = body
		return strings.Contains(body, want), nil
	})
	t.Logf("%s: %s", a.Node, last)
}

// FeedsGrow waits until agent i's watchdog has been fed n more times,
// without a magic close in between.
func (g *FencedGroup) FeedsGrow(t *testing.T, i, n int) {
	t.Helper()
	a := g.Agents[i]
	before := a.Device.Writes()
	Poll(t, fmt.Sprintf("%d more feeds on %s", n, a.Node), func(context.Context) (bool, error) {
		w := a.Device.Writes()
		if w.MagicCloses != before.MagicCloses {
			return false, fmt.Errorf("%s was disarmed (%d magic closes, %d before)", a.Node, w.MagicCloses, before.MagicCloses)
		}
		return w.Feeds >= before.Feeds+n, nil
	})
}
