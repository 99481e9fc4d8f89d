package framework

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy forwards connections from a loopback port to a target address
// until the test cuts it: the network between one client and a server,
// under the test's control. Cut closes every open connection and refuses
// new ones at once (the client sees its requests fail, as when a node
// loses its route to the server); Restore lets them through again.
type TCPProxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// NewTCPProxy listens on a free loopback port and forwards to target
// (host:port); it stops when the test ends.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p, err := StartTCPProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartTCPProxy is NewTCPProxy for a suite's set-up, which outlives any
// one test: it stops on Close.
func StartTCPProxy(target string) (*TCPProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &TCPProxy{target: target, ln: ln, conns: map[net.Conn]bool{}}
	go p.serve()
	return p, nil
}

// Close stops the proxy and closes its connections.
func (p *TCPProxy) Close() { _ = p.ln.Close(); p.Cut() }

// Addr is the proxy's host:port.
func (p *TCPProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes the open connections and refuses new ones until Restore.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Restore lets connections through again.
func (p *TCPProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *TCPProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(in)
	}
}

func (p *TCPProxy) forward(in net.Conn) {
	if !p.track(in) {
		_ = in.Close()
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(out) {
		_ = in.Close()
		if out != nil {
			_ = out.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// track registers c unless the proxy is cut.
func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = true
	return true
}
