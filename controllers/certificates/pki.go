package certificates

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 5280's subject key identifier, not a security hash
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// keyPair is a certificate with its private key, both as PEM.
type keyPair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	signer  crypto.Signer
}

// parseKeyPair reads a certificate and its key; nil if they are absent,
// unreadable or do not match.
func parseKeyPair(certPEM, keyPEM []byte) *keyPair {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || pair.Leaf == nil {
		return nil
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil
	}
	return &keyPair{Cert: pair.Leaf, CertPEM: certPEM, KeyPEM: keyPEM, signer: signer}
}

// parseCerts reads every certificate of a PEM bundle, skipping what is not one.
func parseCerts(data []byte) []*x509.Certificate {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return certs
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			certs = append(certs, c)
		}
	}
}

// encodeCerts is the PEM bundle of certs.
func encodeCerts(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// newCA makes a self-signed CA valid from now for lifetime.
func newCA(now time.Time, lifetime time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", deckhousev1.CertificateAuthoritySecret, now.Unix())},
		NotBefore:             now,
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, key, nil)
}

// issueLeaf makes a serving certificate for dnsNames signed by ca, valid
// from now for lifetime but never beyond ca.
func issueLeaf(ca *keyPair, dnsNames []string, now time.Time, lifetime time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a serving key: %w", err)
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		DNSNames:    dnsNames,
		NotBefore:   now,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return sign(tmpl, key, ca)
}

// sign signs tmpl (with key's public half) by parent, or by key itself
// when parent is nil.
func sign(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *keyPair) (*keyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	ski := sha1.Sum(pub) //nolint:gosec // see the import
	tmpl.SubjectKeyId = ski[:]
	issuer, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		issuer, signer = parent.Cert, parent.signer
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("signing a certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		signer:  key,
	}, nil
}

// caStep is the CA Secret after plan's CA step: the signing and next CA
// and the trusted bundle. New CAs are valid from now for lifetime.
func caStep(now time.Time, lifetime time.Duration, plan Plan, trusted []*x509.Certificate, signing, next *keyPair) (_, _ *keyPair, _ []*x509.Certificate, err error) {
	trusted = slices.Clone(trusted)
	switch plan.CA {
	case CACreate:
		if signing, err = newCA(now, lifetime); err != nil {
			return nil, nil, nil, err
		}
		next = nil
		trusted = append(slices.DeleteFunc(trusted, func(c *x509.Certificate) bool { return !now.Before(c.NotAfter) }), signing.Cert)
	case CAStartRotation:
		if next, err = newCA(now, lifetime); err != nil {
			return nil, nil, nil, err
		}
		trusted = append(trusted, next.Cert)
	case CAPromote:
		signing, next = next, nil
	case CASetTrusted:
		trusted = plan.Trusted
	}
	return signing, next, trusted, nil
}
