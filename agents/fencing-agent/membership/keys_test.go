package membership

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-manager/node-manager/agents/fencing-agent/gossipkey"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// writeKeys lays out keys in dir as the kubelet mounts the group's Secret:
// one file per key; a key of nil removes its file.
func writeKeys(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, key := range files {
		path := filepath.Join(dir, name)
		if key == nil {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(path, key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// keyDir is a keyring directory holding primary alone.
func keyDir(t *testing.T, primary []byte) string {
	t.Helper()
	dir := t.TempDir()
	writeKeys(t, dir, map[string][]byte{deckhousev1.FencingGossipKeyPrimary: primary})
	return dir
}

// An agent that cannot read its keyring refuses to gossip: nothing
// listens, it never joins, and it says why; it never falls back to
// gossip in the clear.
func TestAnAgentWithoutItsKeyringDoesNotGossip(t *testing.T) {
	port := freePort(t)
	dir := t.TempDir()
	cfg := Config{Name: "a", Group: "workers", BindAddr: "127.0.0.1", Port: port, KeyDir: dir}
	if _, err := Start(cfg); err == nil {
		t.Fatal("Start without a keyring succeeded")
	}
	g := New(cfg)
	g.SetGroup(map[string]string{"a": "127.0.0.1"})
	if n := g.Join(nil); n != 0 || g.Joined() {
		t.Fatalf("without a keyring: Join contacted %d, joined %v", n, g.Joined())
	}
	if err := g.KeyError(); err == nil || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("KeyError = %v, want it to name the missing primary key", err)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		_ = c.Close()
		t.Fatal("an agent without its keyring listens for gossip")
	}
	// The keyring arrives (the kubelet mounts the Secret late): the next
	// Join starts the gossip.
	writeKeys(t, dir, map[string][]byte{deckhousev1.FencingGossipKeyPrimary: gossipkey.New()})
	g.Join(nil)
	defer g.Leave(time.Second)
	if !g.Joined() || g.KeyError() != nil || g.Keyring() == "" {
		t.Fatalf("with its keyring: joined %v, key error %v, keyring %q", g.Joined(), g.KeyError(), g.Keyring())
	}
	// The file breaks later: the gossip goes on with the keys read last,
	// and says so.
	writeKeys(t, dir, map[string][]byte{deckhousev1.FencingGossipKeyPrimary: []byte("short")})
	before := g.Keyring()
	g.Join(nil)
	if g.KeyError() == nil || g.Keyring() != before {
		t.Fatalf("a broken keyring file: key error %v, keyring %q (was %q)", g.KeyError(), g.Keyring(), before)
	}
}

// An agent with the group's label but another key is no member.
func TestAnAgentWithAnotherKeyIsNotAMember(t *testing.T) {
	pa, pb := freePort(t), freePort(t)
	a, err := Start(Config{Name: "a", Group: "workers", BindAddr: "127.0.0.1", Port: pa, ProbeInterval: 200 * time.Millisecond, KeyDir: keyDir(t, gossipkey.New())})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Leave(time.Second)
	b, err := Start(Config{Name: "b", Group: "workers", BindAddr: "127.0.0.1", Port: pb, ProbeInterval: 200 * time.Millisecond, KeyDir: keyDir(t, gossipkey.New())})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Leave(time.Second)
	for _, g := range []*Gossip{a, b} {
		g.SetGroup(map[string]string{"a": "127.0.0.1", "b": "127.0.0.1"})
	}
	if n := b.Join([]string{net.JoinHostPort("127.0.0.1", strconv.Itoa(pa))}); n != 0 {
		t.Fatalf("an agent with another key joined %d members", n)
	}
	if alive := a.Alive(); len(alive) != 1 {
		t.Fatalf("a sees %v alive, want only itself", alive)
	}
	if a.Rejected(RejectedKey) == 0 {
		t.Error("the messages without the key were not counted")
	}
}

// A rotation through the two-key keyring, each agent's files changing at
// its own moment as each kubelet syncs the Secret, never splits the
// group: the next key is accepted everywhere before anyone encrypts with
// it, and the previous one stays accepted until everyone does.
func TestARotationKeepsTheGroupTogether(t *testing.T) {
	old, next := gossipkey.New(), gossipkey.New()
	var gs []*Gossip
	var dirs, peers []string
	for _, name := range []string{"a", "b", "c"} {
		port := freePort(t)
		dir := keyDir(t, old)
		g, err := Start(Config{Name: name, Group: "workers", BindAddr: "127.0.0.1", Port: port, ProbeInterval: 100 * time.Millisecond, KeyDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Leave(time.Second)
		g.SetGroup(map[string]string{"a": "127.0.0.1", "b": "127.0.0.1", "c": "127.0.0.1"})
		gs, dirs = append(gs, g), append(dirs, dir)
		peers = append(peers, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	together := func(step string) {
		t.Helper()
		for _, g := range gs {
			g.Join(peers)
		}
		for i, g := range gs {
			waitFor(t, step+": agent "+strconv.Itoa(i)+" sees three alive", func() bool { return len(g.Alive()) == 3 })
		}
	}
	together("before")
	steps := []map[string][]byte{
		{deckhousev1.FencingGossipKeyNext: next},
		{deckhousev1.FencingGossipKeyPrimary: next, deckhousev1.FencingGossipKeyNext: nil, deckhousev1.FencingGossipKeyPrevious: old},
		{deckhousev1.FencingGossipKeyPrevious: nil},
	}
	for s, files := range steps {
		// One agent at a time takes the step; the group must hold at each.
		for i := range gs {
			writeKeys(t, dirs[i], files)
			gs[i].Join(peers)
			together("step " + strconv.Itoa(s+1) + " after agent " + strconv.Itoa(i))
		}
	}
	want := gossipkey.Keys{Primary: next}.Fingerprint()
	for i, g := range gs {
		if g.Keyring() != want {
			t.Errorf("agent %d uses keyring %s, want %s", i, g.Keyring(), want)
		}
	}
}
