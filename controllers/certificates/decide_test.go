package certificates

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// cfg are short lifetimes, as the e2e test runs them: CA 30s (renewed at
// 20s), serving certificates 12s (renewed at 8s), a 2s propagation delay.
var cfg = Config{Manage: true, CALifetime: 30 * time.Second, LeafLifetime: 12 * time.Second, PropagationDelay: 2 * time.Second}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const svc = bashiblev1alpha1.ServiceName

var names = DNSNames(svc, deckhousev1.Namespace)

func mustCA(t *testing.T, at time.Time) *keyPair {
	t.Helper()
	ca, err := newCA(at, cfg.CALifetime)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustLeaf(t *testing.T, ca *keyPair, at time.Time) *keyPair {
	t.Helper()
	l, err := issueLeaf(ca, names, at, cfg.LeafLifetime)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func leaf(l *keyPair, bundle ...*x509.Certificate) Leaf {
	return Leaf{Service: svc, DNSNames: names, Cert: l.Cert, Bundle: bundle}
}

func trusting(cas ...*x509.Certificate) []Consumer {
	return []Consumer{{Name: "apiservices/v1alpha1.bashible.deckhouse.io", Bundles: [][]*x509.Certificate{cas}}}
}

func TestDecideCreatesACAWhenThereIsNoneOrItExpired(t *testing.T) {
	if p := Decide(t0, cfg, Authority{}, []Leaf{{Service: svc, DNSNames: names}}, nil); p.CA != CACreate {
		t.Errorf("no CA: step %s, want create", p.CA)
	}
	ca := mustCA(t, t0)
	a := Authority{Signing: ca.Cert, Trusted: []*x509.Certificate{ca.Cert}}
	if p := Decide(t0.Add(cfg.CALifetime), cfg, a, nil, nil); p.CA != CACreate {
		t.Errorf("expired CA: step %s, want create", p.CA)
	}
	if p := Decide(t0.Add(cfg.CALifetime-time.Second), cfg, a, nil, nil); p.CA == CACreate {
		t.Errorf("a CA one second before its expiry was replaced without a rotation")
	}
}

func TestDecideRepairsTheBundle(t *testing.T) {
	ca, old, stale := mustCA(t, t0), mustCA(t, t0.Add(-10*time.Second)), mustCA(t, t0.Add(-cfg.CALifetime))
	// The signing CA missing from ca.crt is added; an expired one dropped.
	p := Decide(t0, cfg, Authority{Signing: ca.Cert, Trusted: []*x509.Certificate{old.Cert, stale.Cert}}, nil, nil)
	if p.CA != CASetTrusted || !sameSet(p.Trusted, []*x509.Certificate{old.Cert, ca.Cert}) {
		t.Errorf("step %s, trusted %d certificates; want set trusted to the signing and the unexpired old CA", p.CA, len(p.Trusted))
	}
}

func TestDecideIssuesOnlyFromACAEveryConsumerTrusts(t *testing.T) {
	ca := mustCA(t, t0)
	a := Authority{Signing: ca.Cert, Trusted: []*x509.Certificate{ca.Cert}}
	missing := []Leaf{{Service: svc, DNSNames: names}}
	for _, consumers := range [][]Consumer{
		trusting(),
		append(trusting(ca.Cert), Consumer{Name: "validatingwebhookconfigurations/preview", Bundles: [][]*x509.Certificate{{ca.Cert}, nil}}),
	} {
		p := Decide(t0, cfg, a, missing, consumers)
		if len(p.Issue) > 0 || len(p.Waiting) == 0 {
			t.Errorf("a consumer does not trust the CA: issued %v, waiting %v; want nothing issued and a reason", p.Issue, p.Waiting)
		}
	}
	p := Decide(t0, cfg, a, missing, trusting(ca.Cert))
	if p.CA != CANone || p.Issue[svc] != "missing" {
		t.Errorf("every consumer trusts the CA: step %s, issue %v; want the missing certificate issued", p.CA, p.Issue)
	}
	// No consumer at all (nothing labelled yet): nobody to wait for.
	if p := Decide(t0, cfg, a, missing, nil); p.Issue[svc] != "missing" {
		t.Errorf("no consumers: issue %v, want the missing certificate issued", p.Issue)
	}
}

func TestDecideRenewsAServingCertificate(t *testing.T) {
	ca := mustCA(t, t0)
	a := Authority{Signing: ca.Cert, Trusted: []*x509.Certificate{ca.Cert}}
	l := mustLeaf(t, ca, t0)
	due := t0.Add(8 * time.Second)
	p := Decide(due.Add(-time.Second), cfg, a, []Leaf{leaf(l, ca.Cert)}, trusting(ca.Cert))
	if len(p.Issue) > 0 || len(p.Rebundle) > 0 || !p.RecheckAt.Equal(due) {
		t.Errorf("before two thirds: issue %v, rebundle %v, recheck %s; want nothing, recheck at %s", p.Issue, p.Rebundle, p.RecheckAt, due)
	}
	if p := Decide(due, cfg, a, []Leaf{leaf(l, ca.Cert)}, trusting(ca.Cert)); p.Issue[svc] != "due" {
		t.Errorf("at two thirds: issue %v, want due", p.Issue)
	}
	renamed := leaf(l, ca.Cert)
	renamed.DNSNames = DNSNames(svc, "elsewhere")
	if p := Decide(t0, cfg, a, []Leaf{renamed}, trusting(ca.Cert)); p.Issue[svc] != "names changed" {
		t.Errorf("other names wanted: issue %v", p.Issue)
	}
	other := mustCA(t, t0)
	if p := Decide(t0, cfg, a, []Leaf{leaf(mustLeaf(t, other, t0), ca.Cert)}, trusting(ca.Cert)); p.Issue[svc] != "not signed by the signing CA" {
		t.Errorf("signed by a foreign CA: issue %v", p.Issue)
	}
	if p := Decide(t0, cfg, a, []Leaf{leaf(l)}, trusting(ca.Cert)); len(p.Issue) > 0 || !slices.Equal(p.Rebundle, []string{svc}) {
		t.Errorf("ca.crt missing from the Secret: issue %v, rebundle %v; want only ca.crt rewritten", p.Issue, p.Rebundle)
	}
}

func TestDecideHonoursRenewBefore(t *testing.T) {
	ca := mustCA(t, t0)
	l := mustLeaf(t, ca, t0.Add(time.Second))
	at := t0.Add(3 * time.Second)

	forced := leaf(l, ca.Cert)
	forced.RenewBefore = at
	a := Authority{Signing: ca.Cert, Trusted: []*x509.Certificate{ca.Cert}}
	if p := Decide(at.Add(-time.Second), cfg, a, []Leaf{forced}, trusting(ca.Cert)); len(p.Issue) > 0 || !p.RecheckAt.Equal(at) {
		t.Errorf("renew-before in the future: issue %v, recheck %s; want nothing until %s", p.Issue, p.RecheckAt, at)
	}
	if p := Decide(at, cfg, a, []Leaf{forced}, trusting(ca.Cert)); p.Issue[svc] != "renewal requested" {
		t.Errorf("renew-before come: issue %v", p.Issue)
	}
	// A certificate issued at or after the time is not renewed again.
	forced.Cert = mustLeaf(t, ca, at).Cert
	if p := Decide(at.Add(time.Second), cfg, a, []Leaf{forced}, trusting(ca.Cert)); len(p.Issue) > 0 {
		t.Errorf("renewed already: issue %v", p.Issue)
	}

	a.RenewBefore = at
	if p := Decide(at, cfg, a, nil, trusting(ca.Cert)); p.CA != CAStartRotation {
		t.Errorf("renew-before on the CA: step %s, want start rotation", p.CA)
	}
	if p := Decide(at.Add(-time.Second), cfg, a, nil, trusting(ca.Cert)); p.CA != CANone || !p.RecheckAt.Equal(at) {
		t.Errorf("renew-before on the CA in the future: step %s, recheck %s", p.CA, p.RecheckAt)
	}
}

// TestDecideRotatesTheCAInOrder walks one CA rotation step by step.
func TestDecideRotatesTheCAInOrder(t *testing.T) {
	old := mustCA(t, t0)
	l := mustLeaf(t, old, t0.Add(15*time.Second))
	due := t0.Add(20 * time.Second)
	a := Authority{Signing: old.Cert, Trusted: []*x509.Certificate{old.Cert}}
	if p := Decide(due.Add(-time.Second), cfg, a, []Leaf{leaf(l, old.Cert)}, trusting(old.Cert)); p.CA != CANone || !p.RecheckAt.Equal(due) {
		t.Fatalf("before two thirds: step %s, recheck %s; want none, recheck at %s", p.CA, p.RecheckAt, due)
	}
	if p := Decide(due, cfg, a, []Leaf{leaf(l, old.Cert)}, trusting(old.Cert)); p.CA != CAStartRotation {
		t.Fatalf("at two thirds: step %s, want start rotation", p.CA)
	}

	// 1. The next CA is trusted but does not sign until every consumer
	// has trusted it for the propagation delay.
	next := mustCA(t, due)
	both := []*x509.Certificate{old.Cert, next.Cert}
	a = Authority{Signing: old.Cert, Next: next.Cert, Trusted: both}
	now := due.Add(time.Second)
	if p := Decide(now, cfg, a, []Leaf{leaf(l, both...)}, trusting(old.Cert)); p.CA != CANone || len(p.Issue) > 0 {
		t.Errorf("a consumer lacks the next CA: step %s, issue %v; want nothing", p.CA, p.Issue)
	}
	ready := due.Add(precision + cfg.PropagationDelay)
	if p := Decide(ready.Add(-time.Millisecond), cfg, a, []Leaf{leaf(l, both...)}, trusting(both...)); p.CA != CANone || !p.RecheckAt.Equal(ready) {
		t.Errorf("trusted for less than the delay: step %s, recheck %s; want none until %s", p.CA, p.RecheckAt, ready)
	}
	if p := Decide(ready, cfg, a, []Leaf{leaf(l, both...)}, trusting(both...)); p.CA != CAPromote {
		t.Fatalf("trusted by all for the delay: step %s, want promote", p.CA)
	}
	// While the next CA waits, the signing one still renews what is due.
	if p := Decide(t0.Add(23*time.Second), cfg, a, []Leaf{leaf(l, both...)}, trusting(old.Cert)); p.Issue[svc] != "due" {
		t.Errorf("a certificate due while the next CA waits: issue %v", p.Issue)
	}

	// 2. Promoted: the serving certificate is re-issued; the old CA stays.
	a = Authority{Signing: next.Cert, Trusted: both}
	now = ready.Add(time.Second)
	p := Decide(now, cfg, a, []Leaf{leaf(l, both...)}, trusting(both...))
	if p.CA != CANone || p.Issue[svc] != "not signed by the signing CA" {
		t.Fatalf("promoted: step %s, issue %v; want the certificate re-issued and the bundle kept", p.CA, p.Issue)
	}

	// 3. The old CA leaves only a propagation delay after the re-issue.
	l2 := mustLeaf(t, next, now)
	settled := l2.Cert.NotBefore.Add(precision + cfg.PropagationDelay)
	if p := Decide(settled.Add(-time.Millisecond), cfg, a, []Leaf{leaf(l2, both...)}, trusting(both...)); p.CA != CANone || !p.RecheckAt.Equal(settled) {
		t.Errorf("re-issued less than the delay ago: step %s, recheck %s; want none until %s", p.CA, p.RecheckAt, settled)
	}
	p = Decide(settled, cfg, a, []Leaf{leaf(l2, both...)}, trusting(both...))
	if p.CA != CASetTrusted || !sameSet(p.Trusted, []*x509.Certificate{next.Cert}) {
		t.Fatalf("settled: step %s, trusted %d; want the old CA retired", p.CA, len(p.Trusted))
	}
	// Not while any certificate it signed is still in a Secret.
	other := Leaf{Service: infrav1alpha1.CAPIWebhookService, DNSNames: DNSNames(infrav1alpha1.CAPIWebhookService, "ns"), Cert: l.Cert, Bundle: both}
	if p := Decide(settled, cfg, a, []Leaf{leaf(l2, both...), other}, trusting(both...)); p.CA == CASetTrusted {
		t.Errorf("a certificate of the old CA is still served, yet the old CA was retired")
	}
}

// world is what the simulation sees: the controller's Secrets and the
// consumers' bundles as written, with their history, so that what a
// server serves and what kube-apiserver trusts can lag behind.
type world struct {
	signing, next *keyPair
	trusted       []*x509.Certificate
	leaf          *keyPair
	written       []event // leaf and bundle writes, in time order
}

type event struct {
	at     time.Time
	leaf   *keyPair            // a serving certificate written
	bundle []*x509.Certificate // or a consumer's bundle written
}

// asOf is the last leaf and bundle written at or before t.
func (w *world) asOf(t time.Time) (leaf *keyPair, bundle []*x509.Certificate) {
	for _, e := range w.written {
		if e.at.After(t) {
			break
		}
		if e.leaf != nil {
			leaf = e.leaf
		}
		if e.bundle != nil {
			bundle = e.bundle
		}
	}
	return leaf, bundle
}

// TestRotationsNeverServeAnUnverifiableCertificate runs the controller's
// decisions (and caStep, the CA Secret's changes) for eight CA lifetimes
// in 100 ms steps, with the worst lags the propagation delay allows: a
// written serving certificate reaches the server, and a written caBundle
// kube-apiserver, only a full delay later. At every step, what the server
// serves verifies against what kube-apiserver trusts, at that moment.
func TestRotationsNeverServeAnUnverifiableCertificate(t *testing.T) {
	for _, lag := range []struct{ leaf, bundle time.Duration }{
		{0, 0}, {cfg.PropagationDelay, 0}, {0, cfg.PropagationDelay}, {cfg.PropagationDelay, cfg.PropagationDelay},
	} {
		w := &world{}
		var consumerBundle []*x509.Certificate
		rotations, issued := 0, 0
		start := t0
		for now := start; now.Before(start.Add(8 * cfg.CALifetime)); now = now.Add(100 * time.Millisecond) {
			// The controller syncs until it has nothing more to do now.
			for range 10 {
				a := Authority{Trusted: w.trusted}
				if w.signing != nil {
					a.Signing = w.signing.Cert
				}
				if w.next != nil {
					a.Next = w.next.Cert
				}
				var leaves []Leaf
				l := Leaf{Service: svc, DNSNames: names}
				if w.leaf != nil {
					l.Cert, l.Bundle = w.leaf.Cert, w.trusted
				}
				leaves = append(leaves, l)
				p := Decide(now, cfg, a, leaves, trusting(consumerBundle...))
				if p.CA != CANone {
					if p.CA == CAPromote {
						rotations++
					}
					var err error
					if w.signing, w.next, w.trusted, err = caStep(now, cfg.CALifetime, p, w.trusted, w.signing, w.next); err != nil {
						t.Fatal(err)
					}
					continue
				}
				changed := false
				if NeedsBundle(consumerBundle, w.trusted) {
					consumerBundle = slices.Clone(w.trusted)
					w.written = append(w.written, event{at: now.Add(lag.bundle), bundle: consumerBundle})
					changed = true
				}
				if _, ok := p.Issue[svc]; ok {
					var err error
					if w.leaf, err = issueLeaf(w.signing, names, now, cfg.LeafLifetime); err != nil {
						t.Fatal(err)
					}
					w.written = append(w.written, event{at: now.Add(lag.leaf), leaf: w.leaf})
					issued++
					changed = true
				}
				slices.SortStableFunc(w.written, func(a, b event) int { return a.at.Compare(b.at) })
				if !changed {
					break
				}
			}
			served, trusted := w.asOf(now)
			if served == nil || trusted == nil {
				if now.Sub(start) > 2*cfg.PropagationDelay {
					t.Fatalf("lags %+v: nothing served or trusted %s after the start", lag, now.Sub(start))
				}
				continue
			}
			roots := x509.NewCertPool()
			for _, c := range trusted {
				roots.AddCert(c)
			}
			if _, err := served.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: names[2], CurrentTime: now}); err != nil {
				t.Fatalf("lags %+v: at %s the served certificate (issued %s) does not verify against the %d trusted CAs: %v",
					lag, now.Sub(start), served.Cert.NotBefore.Sub(start), len(trusted), err)
			}
		}
		if rotations < 6 || issued < 20 || len(w.trusted) > 2 {
			t.Errorf("lags %+v: %d CA rotations, %d certificates issued, %d CAs trusted at the end; want a rotation per CA renewal and at most two trusted",
				lag, rotations, issued, len(w.trusted))
		}
		t.Logf("lags %+v: %d CA rotations, %d serving certificates issued", lag, rotations, issued)
	}
}

func TestCertificatesAreWhatServersNeed(t *testing.T) {
	ca := mustCA(t, t0)
	if !ca.Cert.IsCA || ca.Cert.NotAfter.Sub(ca.Cert.NotBefore) != cfg.CALifetime {
		t.Errorf("CA: IsCA %v, lifetime %s", ca.Cert.IsCA, ca.Cert.NotAfter.Sub(ca.Cert.NotBefore))
	}
	l := mustLeaf(t, ca, t0.Add(25*time.Second))
	if !l.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("a serving certificate outlives its CA: %s > %s", l.Cert.NotAfter, ca.Cert.NotAfter)
	}
	if !slices.Equal(l.Cert.DNSNames, names) || !strings.HasSuffix(names[3], ".svc.cluster.local") {
		t.Errorf("names %v", l.Cert.DNSNames)
	}
	if parseKeyPair(l.CertPEM, l.KeyPEM) == nil || parseKeyPair(l.CertPEM, ca.KeyPEM) != nil {
		t.Errorf("parseKeyPair accepts a mismatched pair or refuses a good one")
	}
	if got := parseCerts(encodeCerts([]*x509.Certificate{ca.Cert, l.Cert})); len(got) != 2 || !got[1].Equal(l.Cert) {
		t.Errorf("PEM round trip: %d certificates", len(got))
	}
}

func TestConfigValidate(t *testing.T) {
	if err := cfg.Validate(); err != nil {
		t.Errorf("the test lifetimes: %v", err)
	}
	for _, bad := range []Config{
		{CALifetime: time.Hour, LeafLifetime: 2 * time.Hour, PropagationDelay: time.Minute},
		{CALifetime: time.Hour, LeafLifetime: 3 * time.Minute, PropagationDelay: time.Minute},
		{CALifetime: 6 * time.Minute, LeafLifetime: 6 * time.Minute, PropagationDelay: time.Minute},
		{CALifetime: 0, LeafLifetime: time.Hour},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
