package fencingagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// rssKiB is the agent's resident memory (VmRSS of /proc/<pid>/status).
func rssKiB(t *testing.T, a *stack.FencingAgent) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", a.PID())
	return 0
}

// metricIs polls until agent i exports series with value.
func metricIs(t *testing.T, a *stack.FencingAgent, series string) {
	t.Helper()
	framework.Poll(t, a.Node+": "+series, func(ctx context.Context) (bool, error) {
		_, body, err := a.Metrics(ctx)
		return err == nil && strings.Contains(body, "\n"+series+"\n"), nil
	})
}

// forge announces members nodes of the group to the agents to, from an
// attacker with the group's label and no key, every 100 ms until ctx
// ends: alive, with ever higher incarnations (so they win over the
// members' own), and meta.
func forge(ctx context.Context, t *testing.T, g *framework.FencedGroup, meta []byte, to []*stack.FencingAgent, nodes ...int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for inc := uint32(1 << 20); ctx.Err() == nil; inc++ {
			var members []framework.ForgedMember
			for _, i := range nodes {
				members = append(members, framework.ForgedMember{Name: g.Nodes[i], Addr: net.IPv4(127, 0, 0, 1),
					Port: uint16(g.Agents[i].GossipPort), Meta: meta, Incarnation: inc})
			}
			for _, a := range to {
				_, _ = framework.GossipPushPull(ctx, nil, a.GossipAddress(), g.Name, members)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return &wg
}

// An attacker who reaches the gossip port and knows the group's label (its
// name) but not its key pushes 300,000 alive members to every agent: the
// agents take none of them in (their memory stays flat, their gossip lists
// only the group), and every node keeps feeding. Before the gossip was
// encrypted, each agent added all 300,000 members and grew by hundreds of
// MiB, past the DaemonSet's 128 Mi limit.
func TestAnAttackerWithoutTheKeyCannotFloodTheGossip(t *testing.T) {
	g := startGroup(t, "fa-flood")
	before := make([]int, len(g.Agents))
	for i, a := range g.Agents {
		before[i] = rssKiB(t, a)
	}
	fake := make([]framework.ForgedMember, 300_000)
	for i := range fake {
		fake[i] = framework.ForgedMember{Name: fmt.Sprintf("fake-%d", i), Addr: net.IPv4(127, 0, 0, 1), Port: 1, Meta: framework.MetaAPIReached, Incarnation: 1}
	}
	for _, a := range g.Agents {
		n, err := framework.GossipPushPull(framework.Context(t), nil, a.GossipAddress(), g.Name, fake)
		t.Logf("pushed 300,000 members to %s: %d bytes answered, %v", a.Node, n, err)
	}
	for i, a := range g.Agents {
		g.FeedsGrow(t, i, 5)
		metricIs(t, a, "fencing_agent_gossip_members 3")
		g.ReadyzSays(t, i, "3 of 3 members")
		after := rssKiB(t, a)
		t.Logf("%s: VmRSS %d KiB before the flood, %d KiB after", a.Node, before[i], after)
		if after-before[i] > 16*1024 {
			t.Errorf("%s grew by %d KiB under the flood", a.Node, after-before[i])
		}
	}
}

// During a full API outage an attacker re-announces every member as
// reaching the API (with incarnations higher than the members' own): were
// it believed, every agent would think itself the one cut off and starve.
// Nobody starves.
func TestForgedGossipDuringAnAPIOutageStarvesNobody(t *testing.T) {
	g := startGroup(t, "fa-forge")
	for _, p := range g.Proxies {
		p.Cut()
	}
	for i := range g.Agents {
		g.ReadyzSays(t, i, "sees a majority of its group without the API too")
	}
	ctx, cancel := context.WithCancel(framework.Context(t))
	wg := forge(ctx, t, g, framework.MetaAPIReached, g.Agents, 0, 1, 2)
	start := time.Now()
	framework.Poll(t, "3 s of forged gossip", func(ctx context.Context) (bool, error) {
		for _, a := range g.Agents {
			if _, body, err := a.Readyz(ctx); err == nil && strings.Contains(body, "starve") {
				return false, fmt.Errorf("%s starves under forged gossip: %s", a.Node, body)
			}
		}
		return time.Since(start) > 3*time.Second, nil
	})
	for i := range g.Agents {
		g.FeedsGrow(t, i, 3)
	}
	cancel()
	wg.Wait()
	for _, p := range g.Proxies {
		p.Restore()
	}
}

// One agent is cut off from the API and its peers (frozen), and an
// attacker keeps announcing those peers alive and without the API too:
// were it believed, the cut-off node would keep its outage quorum and keep
// feeding while the fencing controller frees its pods. It stops feeding.
func TestAnAttackerCannotKeepACutOffNodeFeeding(t *testing.T) {
	g := startGroup(t, "fa-split")
	a := g.Agents[0]
	ctx, cancel := context.WithCancel(framework.Context(t))
	defer cancel()
	for _, peer := range g.Agents[1:] {
		if err := peer.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	g.Proxies[0].Cut()
	wg := forge(ctx, t, g, framework.MetaAPIUnreached, g.Agents[:1], 1, 2)
	g.ReadyzSays(t, 0, "this node sees less than a majority of its group: cut off")
	waitUnfed(t, a, " under forged gossip")
	cancel()
	wg.Wait()
	for _, peer := range g.Agents[1:] {
		if err := peer.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	g.Proxies[0].Restore()
	g.FeedsGrow(t, 0, 3)
}
