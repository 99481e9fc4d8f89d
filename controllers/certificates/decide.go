package certificates

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"
)

// Config are the lifetimes (Options: the flags --ca-lifetime,
// --serving-certificate-lifetime and --certificate-propagation-delay,
// checked there).
type Config = Options

// Authority is what the CA Secret holds.
type Authority struct {
	// Signing signs the serving certificates; nil when the Secret is absent
	// or its tls.crt and tls.key are not a usable CA key pair.
	Signing *x509.Certificate
	// Next is the CA a rotation introduces: trusted, not yet signing.
	Next *x509.Certificate
	// Trusted is the bundle (ca.crt) every consumer gets.
	Trusted []*x509.Certificate
	// RenewBefore (RenewBeforeAnnotation) forces a rotation of a Signing CA
	// issued before it, once that time has come; zero when not set.
	RenewBefore time.Time
}

// Leaf is one Service's serving certificate, as its Secret holds it.
type Leaf struct {
	Service string
	// DNSNames are the names the certificate must have.
	DNSNames []string
	// Cert is nil when the Secret is absent or its tls.crt and tls.key are
	// not a usable key pair.
	Cert *x509.Certificate
	// Bundle is the Secret's ca.crt.
	Bundle []*x509.Certificate
	// RenewBefore (RenewBeforeAnnotation) forces a new certificate if Cert
	// was issued before it.
	RenewBefore time.Time
}

// Consumer is an object whose caBundles are kept: an APIService, a
// webhook configuration or a CRD, with the bundle of each of its client
// configurations that points at one of the Services.
type Consumer struct {
	Name    string
	Bundles [][]*x509.Certificate
}

// CAStep is the one change to the CA Secret a sync makes.
type CAStep int

const (
	// CANone: the CA Secret stays as it is.
	CANone CAStep = iota
	// CACreate: there is no usable signing CA; make one (and trust it next
	// to the unexpired certificates already trusted).
	CACreate
	// CAStartRotation: the signing CA is due; make the next one and trust
	// both. The signing CA keeps signing.
	CAStartRotation
	// CAPromote: every consumer has trusted the next CA for a propagation
	// delay; it signs from now on (the serving certificates follow).
	CAPromote
	// CASetTrusted: the bundle becomes Plan.Trusted (an old CA retired, an
	// expired one dropped, or a signing CA missing from it added).
	CASetTrusted
)

func (s CAStep) String() string {
	return [...]string{"none", "create", "start rotation", "promote", "set trusted"}[s]
}

// Plan is what one sync does. A CA step comes alone: its write queues the
// next sync, which decides on the new state.
type Plan struct {
	CA CAStep
	// Trusted is the bundle after a CASetTrusted step.
	Trusted []*x509.Certificate
	// Issue names the Services whose serving certificate the signing CA
	// issues now, and why.
	Issue map[string]string
	// Rebundle names the Services whose Secret only needs ca.crt rewritten.
	Rebundle []string
	// Waiting says what holds a step back (logged).
	Waiting []string
	// RecheckAt is when a decision may change by time alone (zero: never).
	RecheckAt time.Time
}

// precision is that of a certificate's times: NotBefore is when it was
// made, rounded down to the second.
const precision = time.Second

// renewFraction: a certificate is renewed at two thirds of its life.
const renewNumerator, renewDenominator = 2, 3

// RenewAt is when c is due for renewal.
func RenewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(life / renewDenominator * renewNumerator)
}

// Decide is the whole policy: given the CA Secret, the serving
// certificates and the consumers' bundles at now, what to do. The order of
// a rotation, and why no client ever sees a certificate it cannot verify:
//
//  1. A due CA (two thirds of its life, or RenewBefore) gets a successor,
//     which is trusted at once but does not sign.
//  2. The successor signs only when every consumer's bundle holds it and
//     it has been trusted for a propagation delay.
//  3. Then every serving certificate not signed by it is re-issued.
//  4. The old CA leaves the bundle only when no serving certificate is
//     signed by it and the last re-issue is a propagation delay old.
//
// A serving certificate is (re)issued only by a CA every consumer trusts.
func Decide(now time.Time, cfg Config, a Authority, leaves []Leaf, consumers []Consumer) Plan {
	var p Plan
	recheck := func(t time.Time) {
		if t.After(now) && (p.RecheckAt.IsZero() || t.Before(p.RecheckAt)) {
			p.RecheckAt = t
		}
	}
	if a.Signing == nil || !now.Before(a.Signing.NotAfter) {
		// None, or expired (the controller was off for its last third):
		// nothing it signed verifies any more, so start afresh.
		p.CA = CACreate
		return p
	}
	// The bundle must hold the signing and the next CA, and nothing expired.
	want := slices.DeleteFunc(slices.Clone(a.Trusted), func(c *x509.Certificate) bool { return !now.Before(c.NotAfter) })
	for _, c := range []*x509.Certificate{a.Signing, a.Next} {
		if c != nil && !contains(want, c) {
			want = append(want, c)
		}
	}
	if !sameSet(want, a.Trusted) {
		p.CA, p.Trusted = CASetTrusted, want
		return p
	}
	for _, c := range a.Trusted {
		recheck(c.NotAfter)
	}
	trustedByAll := func(ca *x509.Certificate) []string {
		var missing []string
		for _, c := range consumers {
			for _, b := range c.Bundles {
				if !contains(b, ca) {
					missing = append(missing, c.Name)
					break
				}
			}
		}
		return missing
	}

	switch {
	case a.Next != nil:
		if missing := trustedByAll(a.Next); len(missing) > 0 {
			p.Waiting = append(p.Waiting, fmt.Sprintf("the next CA signs once these trust it: %v", missing))
		} else if ready := a.Next.NotBefore.Add(precision + cfg.PropagationDelay); now.Before(ready) {
			p.Waiting = append(p.Waiting, fmt.Sprintf("the next CA signs at %s, a propagation delay after it was first trusted", ready.UTC().Format(time.RFC3339)))
			recheck(ready)
		} else {
			p.CA = CAPromote
			return p
		}
	case !now.Before(RenewAt(a.Signing)) || requested(now, a.RenewBefore, a.Signing):
		p.CA = CAStartRotation
		return p
	default:
		recheck(RenewAt(a.Signing))
		recheck(a.RenewBefore)
	}

	// Serving certificates, from the signing CA once everyone trusts it.
	missing := trustedByAll(a.Signing)
	lastIssued := time.Time{}
	for _, l := range leaves {
		if l.Cert != nil && l.Cert.NotBefore.After(lastIssued) {
			lastIssued = l.Cert.NotBefore
		}
		why := leafNeeds(now, a.Signing, l)
		if why == "" {
			recheck(RenewAt(l.Cert))
			recheck(l.RenewBefore)
			if !sameSet(l.Bundle, a.Trusted) {
				p.Rebundle = append(p.Rebundle, l.Service)
			}
			continue
		}
		if len(missing) > 0 {
			p.Waiting = append(p.Waiting, fmt.Sprintf("%s's certificate (%s) is issued once these trust the CA: %v", l.Service, why, missing))
			continue
		}
		if p.Issue == nil {
			p.Issue = map[string]string{}
		}
		p.Issue[l.Service] = why
	}
	if len(p.Issue) > 0 || a.Next != nil {
		return p
	}

	// Retire the CAs that no longer sign anything served.
	var keep []*x509.Certificate
	for _, c := range a.Trusted {
		if c.Equal(a.Signing) || slices.ContainsFunc(leaves, func(l Leaf) bool { return l.Cert != nil && l.Cert.CheckSignatureFrom(c) == nil }) {
			keep = append(keep, c)
		}
	}
	if len(keep) == len(a.Trusted) {
		return p
	}
	if settled := lastIssued.Add(precision + cfg.PropagationDelay); now.Before(settled) {
		p.Waiting = append(p.Waiting, fmt.Sprintf("the previous CA leaves the bundle at %s, a propagation delay after the last serving certificate it no longer signs was replaced", settled.UTC().Format(time.RFC3339)))
		recheck(settled)
		return p
	}
	p.CA, p.Trusted = CASetTrusted, keep
	return p
}

// leafNeeds says why l needs a new certificate from signing ("" if not).
func leafNeeds(now time.Time, signing *x509.Certificate, l Leaf) string {
	switch {
	case l.Cert == nil:
		return "missing"
	case l.Cert.CheckSignatureFrom(signing) != nil:
		return "not signed by the signing CA"
	case !slices.Equal(l.Cert.DNSNames, l.DNSNames):
		return "names changed"
	case !now.Before(RenewAt(l.Cert)):
		return "due"
	case requested(now, l.RenewBefore, l.Cert):
		return "renewal requested"
	}
	return ""
}

// requested: a renewal was asked for (RenewBeforeAnnotation) of
// certificates issued before renewBefore, that time has come, and c was
// issued before it. A time in the future takes effect when it comes, so
// the certificates issued meanwhile are not renewed over and over.
func requested(now, renewBefore time.Time, c *x509.Certificate) bool {
	return !renewBefore.IsZero() && !renewBefore.After(now) && renewBefore.After(c.NotBefore)
}

// NeedsBundle reports whether a consumer's bundle differs from trusted.
func NeedsBundle(bundle, trusted []*x509.Certificate) bool { return !sameSet(bundle, trusted) }

func contains(certs []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(certs, c.Equal)
}

// sameSet: the same certificates, whatever the order and repetitions.
func sameSet(a, b []*x509.Certificate) bool {
	for _, c := range a {
		if !contains(b, c) {
			return false
		}
	}
	for _, c := range b {
		if !contains(a, c) {
			return false
		}
	}
	return true
}
