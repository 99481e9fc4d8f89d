package membership

import (
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/node-manager/node-manager/agents/fencing-agent/gossipkey"
)

// start starts agent name of group "workers" on addr with the group's
// key and the group's Nodes (name → InternalIP).
func start(t *testing.T, name, addr, dir string, group map[string]string) (*Gossip, string) {
	t.Helper()
	port := freePort(t)
	g, err := Start(Config{Name: name, Group: "workers", BindAddr: addr, Port: port, ProbeInterval: 100 * time.Millisecond, KeyDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Leave(time.Second) })
	g.SetGroup(group)
	return g, net.JoinHostPort(addr, strconv.Itoa(port))
}

// A member with the key but a name that is no Node of the group is never
// listed: membership is bounded by the group.
func TestAMemberThatIsNoNodeOfTheGroupIsRefused(t *testing.T) {
	dir := keyDir(t, gossipkey.New())
	group := map[string]string{"a": "127.0.0.1", "b": "127.0.0.1"}
	a, aAddr := start(t, "a", "127.0.0.1", dir, group)
	b, _ := start(t, "b", "127.0.0.1", dir, group)
	x, _ := start(t, "intruder", "127.0.0.1", dir, group)
	b.Join([]string{aAddr})
	x.Join([]string{aAddr})
	waitFor(t, "a sees b", func() bool { return slices.Contains(a.Alive(), "b") })
	waitFor(t, "the intruder refused", func() bool { return a.Rejected(RejectedMember) > 0 })
	for _, g := range []*Gossip{a, b} {
		if slices.Contains(g.Alive(), "intruder") {
			t.Fatalf("%v lists a member that is no Node of the group", g.Alive())
		}
	}
}

// Only the group's Nodes' InternalIPs may send: a member of the group's
// name, with the key, sending from another address is refused, and so is
// its announcement at an address that is not its Node's.
func TestOnlyTheGroupsAddressesMaySend(t *testing.T) {
	dir := keyDir(t, gossipkey.New())
	group := map[string]string{"a": "127.0.0.1", "b": "127.0.0.2"}
	a, aAddr := start(t, "a", "127.0.0.1", dir, group)
	b, _ := start(t, "b", "127.0.0.3", dir, group)
	if n := b.Join([]string{aAddr}); n != 0 {
		t.Fatalf("b, sending from an address that is not its Node's, joined %d", n)
	}
	waitFor(t, "b at another address refused", func() bool { return a.Rejected(RejectedSource) > 0 })
	// A stream from an address outside the group is closed unread.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	c, err := d.Dial("tcp", aAddr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("anything"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stream from outside the group was answered")
	}
	_ = c.Close()
	if a.Rejected(RejectedSource) == 0 {
		t.Fatal("the stream from an address outside the group was not counted")
	}
	if alive := a.Alive(); !slices.Equal(alive, []string{"a"}) {
		t.Fatalf("a lists %v", alive)
	}
	// The same member at its Node's address is admitted.
	b2, _ := start(t, "b", "127.0.0.2", dir, group)
	b2.Join([]string{aAddr})
	waitFor(t, "a sees b at its InternalIP", func() bool { return slices.Contains(a.Alive(), "b") })
}

func TestAPushPullLargerThanTheGroupIsRefusedWhole(t *testing.T) {
	r := &rejections{}
	adm := &admission{self: "a", rejected: r}
	adm.set(map[string]string{"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"})
	peers := make([]*memberlist.Node, 15)
	if err := adm.NotifyMerge(peers[:14]); err != nil {
		t.Fatalf("a push/pull of 14 for a group of 3: %v", err)
	}
	if err := adm.NotifyMerge(peers); err == nil || r.merge.Load() != 1 {
		t.Fatalf("a push/pull of 15 for a group of 3: %v, counted %d", err, r.merge.Load())
	}
	if err := adm.NotifyAlive(&memberlist.Node{Name: "b", Addr: net.ParseIP("10.0.0.9")}); err == nil {
		t.Fatal("b announced at another address than its Node's was admitted")
	}
	if err := adm.NotifyAlive(&memberlist.Node{Name: "b", Addr: net.ParseIP("10.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	if err := adm.NotifyAlive(&memberlist.Node{Name: "a", Addr: net.ParseIP("192.0.2.1")}); err != nil {
		t.Fatalf("itself: %v", err)
	}
}
