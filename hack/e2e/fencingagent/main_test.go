// Package fencingagent is the e2e suite of fencing-agent: the real binary,
// three per group, each as the fencing-agent ServiceAccount with a token
// bound to a Pod on its node (so the manifests' RBAC and admission policy
// are what it runs under), a FIFO as its watchdog (no real watchdog is
// ever armed here), and its own TCP proxy to kube-apiserver that a test
// can cut.
package fencingagent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// f is not bare: the stack builds fencing-agent and applies its RBAC and
// the admission policies; neither bashible-apiserver nor
// node-manager-controller is started, as the agent needs neither.
var f = framework.New(framework.Options{})

func TestMain(m *testing.M) { os.Exit(f.Run(m, nil)) }

// group is a fenced NodeGroup of three Nodes, each with its agent.
type group struct {
	name    string
	mode    string
	nodes   []string
	proxies []*framework.TCPProxy
	agents  []*stack.FencingAgent
}

// startGroup creates group name (spec.fencing.mode Watchdog) with three
// Nodes, starts an agent on each — every one knows the others' gossip
// addresses and reaches the API through its own proxy — and waits until
// all three are armed: Node labelled, watchdog fed, ready.
func startGroup(t *testing.T, name string) *group {
	t.Helper()
	return startGroupIn(t, name, deckhousev1.FencingModeWatchdog)
}

// startGroupIn is startGroup in the given fencing mode; in Notify mode
// "armed" means labelled and ready, with nothing written to the device.
func startGroupIn(t *testing.T, name, mode string) *group {
	t.Helper()
	ctx := framework.Context(t)
	f.TestGroup(t, framework.NewGroup(name, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: mode}
	}))
	g := &group{name: name, mode: mode}
	var gossipPorts []int
	for i := range 3 {
		node := fmt.Sprintf("%s-%d", name, i)
		f.TestNode(t, framework.NewNode(node, name))
		g.nodes = append(g.nodes, node)
		g.proxies = append(g.proxies, framework.NewTCPProxy(t, strings.TrimPrefix(f.CP.APIServerURL, "https://")))
		port, err := controlplane.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		gossipPorts = append(gossipPorts, port)
	}
	for i, node := range g.nodes {
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
		a, err := f.Env.StartFencingAgent(ctx, stack.FencingAgentOptions{
			Node: node, Group: name, Mode: mode, Token: token, APIServer: g.proxies[i].Addr(), GossipPort: gossipPorts[i], Peers: peers,
		})
		if err != nil {
			t.Fatal(err)
		}
		g.agents = append(g.agents, a)
		t.Cleanup(func() {
			_ = a.Signal(syscall.SIGCONT) // in case the test froze it
			a.Stop()
		})
	}
	for i := range g.agents {
		g.waitArmed(t, i)
	}
	return g
}

// waitArmed waits until agent i is ready, its Node labelled and its
// watchdog fed since the last magic close.
func (g *group) waitArmed(t *testing.T, i int) {
	t.Helper()
	a := g.agents[i]
	framework.Poll(t, "agent on "+a.Node+" armed, labelled and feeding", func(ctx context.Context) (bool, error) {
		if a.Exited() {
			return false, a.Failure(fmt.Errorf("exited"))
		}
		code, _, err := a.Readyz(ctx)
		if err != nil || code != 200 {
			return false, nil
		}
		w := a.Device.Writes()
		if g.mode == deckhousev1.FencingModeNotify {
			return g.labelled(ctx, i), nil
		}
		return g.labelled(ctx, i) && w.Feeds > 0 && w.Last != 'V', nil
	})
}

// labelled reports whether node i carries the fencing-enabled label.
func (g *group) labelled(ctx context.Context, i int) bool {
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, g.nodes[i], metav1.GetOptions{})
	if err != nil {
		return false
	}
	_, ok := n.Labels[deckhousev1.FencingEnabledLabel]
	return ok
}

// readyzSays polls until agent i's /readyz body contains want.
func (g *group) readyzSays(t *testing.T, i int, want string) {
	t.Helper()
	a := g.agents[i]
	var last string
	framework.Poll(t, fmt.Sprintf("agent on %s says %q", a.Node, want), func(ctx context.Context) (bool, error) {
		_, body, err := a.Readyz(ctx)
		if err != nil {
			return false, nil
		}
		last = body
		return strings.Contains(body, want), nil
	})
	t.Logf("%s: %s", a.Node, last)
}
