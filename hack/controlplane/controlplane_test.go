package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestCertificatesChainToTheirAuthority(t *testing.T) {
	ca, err := newAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := newAuthority("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)

	node, err := ca.clientCert("system:node:n1", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, node.CertPEM)
	if cert.Subject.CommonName != "system:node:n1" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("node certificate subject = %v", cert.Subject)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node certificate does not verify as a client certificate: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate must not verify for serving")
	}

	serving, err := ca.servingCert("api", []string{"bashible-api.d8-cloud-instance-manager.svc"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	scert := parseCert(t, serving.CertPEM)
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "bashible-api.d8-cloud-instance-manager.svc"} {
		if _, err := scert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", host, err)
		}
	}
	foreign := x509.NewCertPool()
	foreign.AddCert(other.cert)
	if _, err := scert.Verify(x509.VerifyOptions{Roots: foreign, DNSName: "localhost"}); err == nil {
		t.Error("a certificate must not verify against another authority")
	}
}

func TestDecodeYAML(t *testing.T) {
	objs, err := DecodeYAML([]byte("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# only a comment\n---\napiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata:\n  name: b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetName() != "a" || objs[1].GetKind() != "NodeGroup" {
		t.Fatalf("decoded %d objects: %+v", len(objs), objs)
	}
	if _, err := DecodeYAML([]byte("metadata:\n  name: x\n")); err == nil || !strings.Contains(err.Error(), "apiVersion and kind") {
		t.Fatalf("a document without kind: want an error naming apiVersion and kind, got %v", err)
	}
	if _, err := DecodeYAML([]byte("kind: [unclosed\n")); err == nil {
		t.Fatal("malformed YAML must be an error")
	}
}

func TestReadManifestsSkipsKustomizationAndKeepsOrder(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"b.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: second\n",
		"a.yml":              "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: first\n",
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yml, b.yaml]\n",
		"notes.txt":          "not a manifest",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := ReadManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	if !slices.Equal(names, []string{"first", "second"}) {
		t.Fatalf("read %v, want [first second]", names)
	}
	if _, err := ReadManifests(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing path must be an error")
	}
}

func TestRepoRootFindsTheProductModule(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "tools", "go.mod")); err != nil {
		t.Fatalf("RepoRoot = %s, which has no hack/tools: %v", root, err)
	}
	if got := modulePath([]byte("// comment\nmodule  example.com/x \n\ngo 1.26\n")); got != "example.com/x" {
		t.Errorf("modulePath = %q", got)
	}
}

func TestBootstrapTokenFormat(t *testing.T) {
	for range 100 {
		id, secret := randomToken(6), randomToken(16)
		tok := BootstrapToken{ID: id, Secret: secret}
		if len(id) != 6 || len(secret) != 16 || strings.Trim(tok.String(), "abcdefghijklmnopqrstuvwxyz0123456789.") != "" {
			t.Fatalf("token %q does not match [a-z0-9]{6}.[a-z0-9]{16}", tok)
		}
	}
}

func TestFreePortsAreDistinctAndFree(t *testing.T) {
	ports, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	low, high := listenPortRange()
	if high <= low {
		t.Fatalf("no room below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range): %d-%d", low, high)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice", p)
		}
		if p < low || p >= high {
			t.Errorf("port %d is outside %d-%d, below the ephemeral range outgoing connections take their ports from", p, low, high)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		_ = l.Close()
	}
}
