package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// ForgedMember is one member state an attacker pushes to a gossip agent.
type ForgedMember struct {
	Name        string
	Addr        net.IP
	Port        uint16
	Meta        []byte
	Incarnation uint32
	// State is memberlist's: 0 alive, 1 suspect, 2 dead.
	State int
}

// The agents' member metadata (membership's): the member's last check
// reached the API, or did not.
var (
	MetaAPIReached   = []byte{'A'}
	MetaAPIUnreached = []byte{'C'}
)

// pushPullHeader and pushNodeState are memberlist's wire structures of a
// push/pull (net.go), encoded alike (msgpack, by field name).
type pushPullHeader struct {
	Nodes        int
	UserStateLen int
	Join         bool
}

type pushNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       int
	Vsn         []uint8
}

// memberlist's message types on a stream.
const (
	pushPullMsg = 6
	hasLabelMsg = 244
)

// GossipPushPull is an attacker on the network who knows the group's label
// (the group's name) but not its key: it opens a TCP stream to a gossip
// agent at to, from the local address from (nil: any), and pushes members
// as its own view of the group in the clear, as memberlist's push/pull
// does, then reads whatever the agent answers. It returns the bytes the
// agent answered and the error that ended the exchange; whether the agent
// took the members in is for the caller to observe on the agent.
func GossipPushPull(ctx context.Context, from net.IP, to, label string, members []ForgedMember) (int, error) {
	var buf bytes.Buffer
	buf.WriteByte(hasLabelMsg)
	buf.WriteByte(byte(len(label)))
	buf.WriteString(label)
	buf.WriteByte(pushPullMsg)
	enc := codec.NewEncoder(&buf, &codec.MsgpackHandle{})
	if err := enc.Encode(&pushPullHeader{Nodes: len(members)}); err != nil {
		return 0, err
	}
	for _, m := range members {
		s := pushNodeState{Name: m.Name, Addr: m.Addr.To4(), Port: m.Port, Meta: m.Meta, Incarnation: m.Incarnation, State: m.State,
			Vsn: []uint8{1, 5, 2, 0, 0, 0}}
		if err := enc.Encode(&s); err != nil {
			return 0, err
		}
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	if from != nil {
		d.LocalAddr = &net.TCPAddr{IP: from}
	}
	conn, err := d.DialContext(ctx, "tcp", to)
	if err != nil {
		return 0, fmt.Errorf("dialing gossip agent %s: %w", to, err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(buf.Bytes()); err != nil {
		return 0, fmt.Errorf("pushing %d members to %s: %w", len(members), to, err)
	}
	n, err := io.Copy(io.Discard, conn)
	return int(n), err
}
