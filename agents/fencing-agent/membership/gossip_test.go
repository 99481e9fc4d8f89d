package membership

import (
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/node-manager/node-manager/agents/fencing-agent/gossipkey"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAgentsOfAGroupSeeEachOtherAndNoticeOneGone(t *testing.T) {
	dir := keyDir(t, gossipkey.New())
	var gs []*Gossip
	var peers []string
	for _, name := range []string{"a", "b", "c"} {
		port := freePort(t)
		g, err := Start(Config{Name: name, Group: "workers", BindAddr: "127.0.0.1", Port: port, ProbeInterval: 200 * time.Millisecond, KeyDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		g.SetGroup(map[string]string{"a": "127.0.0.1", "b": "127.0.0.1", "c": "127.0.0.1"})
		gs = append(gs, g)
		peers = append(peers, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	defer func() {
		for _, g := range gs[:2] {
			g.Leave(time.Second)
		}
	}()
	if gs[0].Joined() {
		t.Fatal("joined before Join")
	}
	gs[0].Join(peers) // the others are not joined yet, but they listen
	for _, g := range gs {
		g.Join(peers)
		if !g.Joined() {
			t.Fatal("not joined after Join")
		}
	}
	for _, g := range gs {
		waitFor(t, "every agent sees three alive", func() bool { return len(g.Alive()) == 3 })
	}
	// The API state each member publishes reaches the others, both ways.
	if got := gs[0].AliveWithoutAPI(); len(got) != 0 {
		t.Fatalf("no member lost the API, yet %v are reported without it", got)
	}
	gs[1].SetAPIReached(false)
	gs[0].SetAPIReached(false)
	waitFor(t, "c sees a and b without the API", func() bool {
		got := gs[2].AliveWithoutAPI()
		slices.Sort(got)
		return slices.Equal(got, []string{"a", "b"})
	})
	gs[1].SetAPIReached(true)
	waitFor(t, "c sees b reach the API again", func() bool {
		return slices.Equal(gs[2].AliveWithoutAPI(), []string{"a"})
	})
	gs[0].SetAPIReached(true)

	gs[2].Leave(time.Second)
	waitFor(t, "a sees c gone", func() bool {
		alive := gs[0].Alive()
		return len(alive) == 2 && !slices.Contains(alive, "c")
	})
}

func TestAnotherGroupsAgentIsNotAMember(t *testing.T) {
	// Even with the same key, the label (authenticated with it) differs.
	dir := keyDir(t, gossipkey.New())
	pa, pb := freePort(t), freePort(t)
	a, err := Start(Config{Name: "a", Group: "workers", BindAddr: "127.0.0.1", Port: pa, ProbeInterval: 200 * time.Millisecond, KeyDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Leave(time.Second)
	a.SetGroup(map[string]string{"a": "127.0.0.1", "b": "127.0.0.1"})
	b, err := Start(Config{Name: "b", Group: "frontends", BindAddr: "127.0.0.1", Port: pb, ProbeInterval: 200 * time.Millisecond, KeyDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Leave(time.Second)
	b.SetGroup(map[string]string{"a": "127.0.0.1", "b": "127.0.0.1"})
	if n := b.Join([]string{net.JoinHostPort("127.0.0.1", strconv.Itoa(pa))}); n != 0 {
		t.Fatalf("an agent of another group joined %d members", n)
	}
	if alive := a.Alive(); len(alive) != 1 {
		t.Fatalf("a sees %v alive, want only itself", alive)
	}
}
