package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

const apiPath = "/apis/bashible.deckhouse.io/v1alpha1"

// simNode is one simulated node's bashible: its own client certificate
// (system:node:<name>), its group, and the checksum it has applied.
type simNode struct {
	name, group string
	cert        tls.Certificate
	// checksum is the configuration the node has; seen is when it first
	// saw the checksum the run waits for.
	checksum atomic.Pointer[string]
	seen     atomic.Int64
}

// fleet is the simulated nodes and what they measured.
type fleet struct {
	server string
	roots  *x509.CertPool
	nodes  []*simNode
	byName map[string]*simNode

	bashibles, bundles, configMaps recorder
}

// newFleet issues every node its client certificate (one CA, an ECDSA
// P-256 key each) and starts each on its group's current checksum.
func newFleet(cp *controlplane.ControlPlane, l layout, checksums map[string]string) (*fleet, error) {
	f := &fleet{server: cp.APIServerURL, roots: x509.NewCertPool(), byName: map[string]*simNode{}}
	f.roots.AppendCertsFromPEM(cp.CACertPEM())
	for _, n := range l.nodes {
		creds, err := cp.NodeCredentials(n.name)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(creds.CertPEM, creds.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("parse the client certificate of %s: %w", n.name, err)
		}
		s := &simNode{name: n.name, group: n.group, cert: cert}
		sum := checksums[n.group]
		s.checksum.Store(&sum)
		f.nodes = append(f.nodes, s)
		f.byName[n.name] = s
	}
	return f, nil
}

// client is what curl in bashible.sh is: a new TLS connection per request,
// with the node's certificate, and no Accept-Encoding (curl asks for a
// compressed response only with --compressed, which bashible does not
// pass; Go's client asks for gzip by default, and the servers then
// compressed every bashibles object, which is above the 128 KB from which
// k8s.io/apiserver compresses, for every request).
func (f *fleet) client(n *simNode) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:    &tls.Config{RootCAs: f.roots, Certificates: []tls.Certificate{n.cert}, MinVersion: tls.VersionTLS12},
		DisableKeepAlives:  true,
		DisableCompression: true,
	}}
}

// served is the part of a served object the node reads.
type served struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// get fetches url as n and records the latency in rec.
func (f *fleet) get(ctx context.Context, c *http.Client, rec *recorder, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		rec.fail(ctx)
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		rec.fail(ctx)
		return nil, fmt.Errorf("GET %s: %d: %v", url, resp.StatusCode, err)
	}
	rec.add(time.Since(start))
	return body, nil
}

// poll is bashible's timer for every node until ctx ends: once per period,
// at a random moment of it, GET bashibles/<group>, and the group's bundle
// when the checksum there differs from the node's. With configMapURL set,
// each node also GETs that ConfigMap once per period at its own random
// moment, for scale.
func (f *fleet) poll(ctx context.Context, period time.Duration, configMapURL string) {
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := f.client(n)
			for {
				offset := rand.N(period)
				cmOffset := rand.N(period)
				start := time.Now()
				if !sleep(ctx, offset) {
					return
				}
				f.pollOnce(ctx, c, n)
				if configMapURL != "" {
					if !sleep(ctx, cmOffset-time.Since(start)) {
						return
					}
					_, _ = f.get(ctx, c, &f.configMaps, configMapURL)
				}
				if !sleep(ctx, period-time.Since(start)) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

func (f *fleet) pollOnce(ctx context.Context, c *http.Client, n *simNode) {
	body, err := f.get(ctx, c, &f.bashibles, f.server+apiPath+"/bashibles/"+n.group)
	if err != nil {
		return
	}
	var obj served
	if err := json.Unmarshal(body, &obj); err != nil {
		f.bashibles.fail(ctx)
		return
	}
	sum := obj.Metadata.Annotations[bashiblev1alpha1.ChecksumAnnotation]
	if sum == *n.checksum.Load() {
		return
	}
	n.seen.CompareAndSwap(0, time.Now().UnixNano())
	if _, err := f.get(ctx, c, &f.bundles, f.server+apiPath+"/nodegroupbundles/"+n.group); err == nil {
		n.checksum.Store(&sum)
	}
}

// expect forgets when the nodes of groups saw a new checksum.
func (f *fleet) expect(groups ...string) {
	for _, n := range f.nodes {
		if slices.Contains(groups, n.group) {
			n.seen.Store(0)
		}
	}
}

// lastSeen is when the last node of groups saw a new checksum; false while
// some node has not.
func (f *fleet) lastSeen(groups ...string) (time.Time, bool) {
	var last int64
	for _, n := range f.nodes {
		if !slices.Contains(groups, n.group) {
			continue
		}
		s := n.seen.Load()
		if s == 0 {
			return time.Time{}, false
		}
		last = max(last, s)
	}
	return time.Unix(0, last), true
}

// seenFraction is the share of the nodes of groups that saw a new checksum.
func (f *fleet) seenFraction(groups ...string) float64 {
	var all, seen int
	for _, n := range f.nodes {
		if slices.Contains(groups, n.group) {
			all++
			if n.seen.Load() != 0 {
				seen++
			}
		}
	}
	return float64(seen) / float64(max(1, all))
}

// watches opens one watch of bashibles/<group> per node through the
// aggregator, each on its own connection with the node's identity, and
// counts the MODIFIED events they receive.
type watches struct {
	opened, events atomic.Int64
	failed         atomic.Int64
	// retried429 counts the 429 answers a watch was opened again after
	// (see watchAttempts).
	retried429 atomic.Int64
	// reasons counts failures by reason (an HTTP status, or the class of
	// a connection error), and keeps the first message of each.
	reasons sync.Map
	// ended counts streams the server ended while the phase still
	// watched (each would have to be opened again to see a change).
	ended atomic.Int64
	// armed is set when the change is made: events before it are the
	// watch's initial state.
	armed atomic.Bool
	// types counts the events received by type (for the report).
	types sync.Map
	// got is per node the time of its first event after reset.
	got sync.Map
}

// watchAttempts bounds how often a node opens its watch: a 429 (API
// Priority and Fairness refusing a request it has no seat or queue room
// for) is tried again after its Retry-After, as client-go does, plus up to
// half of it again so that refused nodes do not all come back at once.
const watchAttempts = 5

func (f *fleet) watch(ctx context.Context, w *watches, n *simNode) {
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: f.roots, Certificates: []tls.Certificate{n.cert}, MinVersion: tls.VersionTLS12},
	}}
	url := fmt.Sprintf("%s%s/bashibles?watch=1&fieldSelector=metadata.name%%3D%s", f.server, apiPath, n.group)
	var resp *http.Response
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			w.fail("request", err.Error())
			return
		}
		resp, err = c.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				w.fail(errorClass(err), err.Error())
			}
			return
		}
		if resp.StatusCode == http.StatusOK {
			break
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || attempt == watchAttempts {
			w.fail("status_"+strconv.Itoa(resp.StatusCode), string(body))
			return
		}
		w.retried429.Add(1)
		wait := retryAfter(resp.Header.Get("Retry-After"))
		if !sleep(ctx, wait+rand.N(wait/2+1)) {
			return
		}
	}
	defer func() { _ = resp.Body.Close() }()
	w.opened.Add(1)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			ev.Type = "UNDECODABLE"
		}
		c, _ := w.types.LoadOrStore(ev.Type, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		if w.armed.Load() && (ev.Type == "MODIFIED" || ev.Type == "ADDED") {
			w.events.Add(1)
			w.got.LoadOrStore(n.name, time.Now())
		}
	}
	if ctx.Err() == nil {
		w.ended.Add(1)
	}
}

// retryAfter is a Retry-After header's delay in seconds; one second when
// it is missing or not a number of seconds.
func retryAfter(header string) time.Duration {
	if s, err := strconv.Atoi(header); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return time.Second
}

// watchFailure is one reason watches failed to open: how many, and the
// first message.
type watchFailure struct {
	count atomic.Int64
	first string
}

func (w *watches) fail(reason, message string) {
	w.failed.Add(1)
	f, _ := w.reasons.LoadOrStore(reason, &watchFailure{first: message})
	f.(*watchFailure).count.Add(1)
}

// errorClass names the kind of a connection error, for the report.
func errorClass(err error) string {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_reset"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "too_many_open_files"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no_local_port"
	}
	return "other_error"
}

// recorder collects request latencies and errors.
type recorder struct {
	mu        sync.Mutex
	latencies []time.Duration
	errors    int
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.latencies = append(r.latencies, d)
	r.mu.Unlock()
}

// fail counts an error, unless the run is ending (a request cut short by
// the end of a phase is not the server's error).
func (r *recorder) fail(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	r.errors++
	r.mu.Unlock()
}

// take returns what was recorded and starts over.
func (r *recorder) take() (latencies []time.Duration, errors int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	latencies, errors = r.latencies, r.errors
	r.latencies, r.errors = nil, 0
	slices.Sort(latencies)
	return latencies, errors
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
