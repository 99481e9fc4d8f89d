package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Service stands for a Kubernetes Service in front of the replicas of a
// server on loopback, since the aggregator reaches a loopback server only
// through one ExternalName port: it accepts connections on one port and
// hands each to a ready replica in turn, as kube-proxy sends a connection
// to a ready endpoint. A replica is ready while GET /readyz answers 200
// within a second; it is probed every probe period, as the kubelet's
// readiness probe would (and its noticing a dead container), so a replica
// that was killed or is shutting down stops getting connections within
// about one period. With no ready replica a connection is closed at once,
// as kube-proxy rejects a connection to a Service without endpoints.
// Connections already handed to a replica stay with it, as they would.
type Service struct {
	ln       net.Listener
	backends []*serviceBackend
	next     atomic.Uint64
	stop     chan struct{}
	wg       sync.WaitGroup
}

type serviceBackend struct {
	addr  string
	ready atomic.Bool
}

// StartService listens on a free loopback port in front of backends
// (host:port of HTTPS servers) and probes them every period; it stops on
// Close.
func StartService(period time.Duration, backends ...string) (*Service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the Service in front of %v: %w", backends, err)
	}
	s := &Service{ln: ln, stop: make(chan struct{})}
	for _, addr := range backends {
		s.backends = append(s.backends, &serviceBackend{addr: addr})
	}
	// The kubelet does not verify a probe's serving certificate either.
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	for _, b := range s.backends {
		s.wg.Add(1)
		go s.probe(probe, b, period)
	}
	go s.serve()
	return s, nil
}

// Port is the Service's port on 127.0.0.1.
func (s *Service) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Ready lists the replicas that get new connections now.
func (s *Service) Ready() []string {
	var out []string
	for _, b := range s.backends {
		if b.ready.Load() {
			out = append(out, b.addr)
		}
	}
	return out
}

// Close stops accepting and probing.
func (s *Service) Close() {
	_ = s.ln.Close()
	close(s.stop)
	s.wg.Wait()
}

func (s *Service) probe(client *http.Client, b *serviceBackend, period time.Duration) {
	defer s.wg.Done()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		b.ready.Store(readyz(client, b.addr))
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

func readyz(client *http.Client, addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (s *Service) serve() {
	for {
		in, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.forward(in)
	}
}

// forward hands in to the next ready replica and copies both ways until
// either side closes.
func (s *Service) forward(in net.Conn) {
	defer func() { _ = in.Close() }()
	var target string
	for range len(s.backends) {
		b := s.backends[s.next.Add(1)%uint64(len(s.backends))]
		if b.ready.Load() {
			target = b.addr
			break
		}
	}
	if target == "" {
		return
	}
	out, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer func() { _ = out.Close() }()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
}
