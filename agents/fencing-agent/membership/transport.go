package membership

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Bounds of what one stream may cost before memberlist decrypts it: it
// reads a whole push/pull (up to 20 MiB) into memory first, so without
// them a sender without the key, from a group node's address (a
// host-network pod there), could hold many such buffers at once.
const (
	maxStreams     = 8
	maxStreamBytes = 4 << 20
)

// filtered is memberlist's network transport admitting packets and
// streams only from the group's Nodes' InternalIPs, as the admission last
// knew them (memberlist's own CIDRsAllowed is fixed at creation, while the
// group changes), and bounding the streams it hands over.
type filtered struct {
	*memberlist.NetTransport
	// local is the bound address streams are dialled from, so that peers,
	// which admit only the group's InternalIPs, see this one whatever the
	// node's routes prefer.
	local    net.IP
	admit    *admission
	rejected *rejections
	packets  chan *memberlist.Packet
	streams  chan net.Conn
	slots    chan struct{}
	stop     chan struct{}
	once     sync.Once
}

func newFiltered(nt *memberlist.NetTransport, local net.IP, admit *admission, rejected *rejections) *filtered {
	f := &filtered{NetTransport: nt, local: local, admit: admit, rejected: rejected,
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn),
		slots: make(chan struct{}, maxStreams), stop: make(chan struct{})}
	go f.forwardPackets()
	go f.forwardStreams()
	return f
}

// PacketCh implements memberlist.Transport.
func (f *filtered) PacketCh() <-chan *memberlist.Packet { return f.packets }

// StreamCh implements memberlist.Transport.
func (f *filtered) StreamCh() <-chan net.Conn { return f.streams }

// DialTimeout implements memberlist.Transport, from the bound address.
func (f *filtered) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if f.local != nil && !f.local.IsUnspecified() {
		d.LocalAddr = &net.TCPAddr{IP: f.local}
	}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (f *filtered) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return f.DialTimeout(a.Addr, timeout)
}

// Shutdown implements memberlist.Transport. The listeners of the
// NetTransport block on its unbuffered channels, and its Shutdown waits
// for them: both are drained until it returns.
func (f *filtered) Shutdown() error {
	f.once.Do(func() { close(f.stop) })
	done := make(chan struct{})
	defer close(done)
	go func() {
		packets, streams := f.NetTransport.PacketCh(), f.NetTransport.StreamCh()
		for {
			select {
			case <-done:
				return
			case <-packets:
			case c := <-streams:
				_ = c.Close()
			}
		}
	}()
	return f.NetTransport.Shutdown()
}

func (f *filtered) forwardPackets() {
	in := f.NetTransport.PacketCh()
	for {
		select {
		case <-f.stop:
			return
		case p := <-in:
			if a, ok := p.From.(*net.UDPAddr); !ok || !f.admit.allowed(a.IP) {
				f.rejected.of(RejectedSource).Add(1)
				continue
			}
			select {
			case f.packets <- p:
			case <-f.stop:
				return
			}
		}
	}
}

func (f *filtered) forwardStreams() {
	in := f.NetTransport.StreamCh()
	for {
		select {
		case <-f.stop:
			return
		case c := <-in:
			a, ok := c.RemoteAddr().(*net.TCPAddr)
			if !ok || !f.admit.allowed(a.IP) {
				f.rejected.of(RejectedSource).Add(1)
				_ = c.Close()
				continue
			}
			select {
			case f.slots <- struct{}{}:
			default:
				_ = c.Close() // busy: the peer retries at its next push/pull
				continue
			}
			select {
			case f.streams <- &boundedConn{Conn: c, left: maxStreamBytes, release: func() { <-f.slots }}:
			case <-f.stop:
				_ = c.Close()
				return
			}
		}
	}
}

// boundedConn fails reads past its byte budget and frees its slot when
// memberlist closes it.
type boundedConn struct {
	net.Conn
	left    int
	release func()
	once    sync.Once
}

var errStreamTooLong = errors.New("gossip stream longer than any group's state")

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errStreamTooLong
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= n
	return n, err
}

func (c *boundedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
