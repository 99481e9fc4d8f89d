package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long every generated certificate lives. A local
// control plane lives for minutes; a day leaves room for a long `make run`.
const certValidity = 24 * time.Hour

// authority is a certificate authority that signs leaf certificates.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// keyPair is a signed certificate and its private key, PEM encoded.
type keyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// certRequest describes a leaf certificate.
type certRequest struct {
	commonName    string
	organizations []string
	dnsNames      []string
	ips           []net.IP
	usages        []x509.ExtKeyUsage
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ECDSA key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal ECDSA key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n, nil
}

// newAuthority creates a self-signed CA.
func newAuthority(commonName string) (*authority, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA %q: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA %q: %w", commonName, err)
	}
	return &authority{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  keyPEM,
	}, nil
}

// sign issues a leaf certificate for req.
func (a *authority) sign(req certRequest) (keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	serial, err := serialNumber()
	if err != nil {
		return keyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.commonName, Organization: req.organizations},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  req.usages,
		DNSNames:     req.dnsNames,
		IPAddresses:  req.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate for %q: %w", req.commonName, err)
	}
	return keyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// clientCert issues a client certificate for a user and its groups.
func (a *authority) clientCert(user string, groups ...string) (keyPair, error) {
	return a.sign(certRequest{
		commonName:    user,
		organizations: groups,
		usages:        []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// servingCert issues a serving certificate for loopback plus extra DNS names.
func (a *authority) servingCert(commonName string, dnsNames []string, ips []net.IP) (keyPair, error) {
	return a.sign(certRequest{
		commonName: commonName,
		dnsNames:   append([]string{"localhost"}, dnsNames...),
		ips:        append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, ips...),
		usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// writeFiles writes name→content files into dir with owner-only permissions.
func writeFiles(dir string, files map[string][]byte) error {
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// serviceAccountKey returns a PEM private key and its PEM public key for
// signing service account tokens.
func serviceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, privPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("marshal service account public key: %w", err)
	}
	return privPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
