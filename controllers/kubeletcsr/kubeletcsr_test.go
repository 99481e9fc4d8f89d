package kubeletcsr

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// request is a kubelet client CSR of a node-manager bootstrap token for
// node, changed by edit (the certificate request) before it is signed.
func request(t *testing.T, node string, edit func(*x509.CertificateRequest)) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: deckhousev1.NodeUserPrefix + node, Organization: []string{NodeOrganization}}}
	if edit != nil {
		edit(tmpl)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
		Username:   deckhousev1.BootstrapUserPrefix + "abcdef",
		Groups:     []string{deckhousev1.BootstrappersGroup, deckhousev1.BootstrapperGroup("worker")},
	}}
}

func TestNodeAcceptsOnlyAKubeletClientRequest(t *testing.T) {
	node, key, err := Node(request(t, "n1", nil))
	if err != nil || node != "n1" || !strings.HasPrefix(key, "sha256:") {
		t.Fatalf("a kubelet client request: %q %q %v", node, key, err)
	}
	for _, tc := range []struct {
		name string
		csr  func() *certificatesv1.CertificateSigningRequest
		want string
	}{
		{"another organization", func() *certificatesv1.CertificateSigningRequest {
			return request(t, "n1", func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:masters"} })
		}, "organization"},
		{"alternative names", func() *certificatesv1.CertificateSigningRequest {
			return request(t, "n1", func(r *x509.CertificateRequest) { r.DNSNames = []string{"n1.example.com"} })
		}, "subject alternative names"},
		{"not a node", func() *certificatesv1.CertificateSigningRequest {
			return request(t, "n1", func(r *x509.CertificateRequest) { r.Subject.CommonName = "admin" })
		}, "is not system:node:<node>"},
		{"a node name that is no object name", func() *certificatesv1.CertificateSigningRequest { return request(t, "N_1", nil) }, "node name"},
		{"server auth", func() *certificatesv1.CertificateSigningRequest {
			c := request(t, "n1", nil)
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageServerAuth)
			return c
		}, "usage"},
		{"no client auth", func() *certificatesv1.CertificateSigningRequest {
			c := request(t, "n1", nil)
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
			return c
		}, "lack"},
		{"not PEM", func() *certificatesv1.CertificateSigningRequest {
			c := request(t, "n1", nil)
			c.Spec.Request = []byte("garbage")
			return c
		}, "not a PEM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Node(tc.csr()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Node: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestFromBootstrapperAndToken(t *testing.T) {
	c := request(t, "n1", nil)
	if !FromBootstrapper(c) || Token(c) != "abcdef" {
		t.Fatalf("a node-manager bootstrap token's request: %v %q", FromBootstrapper(c), Token(c))
	}
	other := c.DeepCopy()
	other.Spec.Groups = []string{"system:bootstrappers"}
	serving := c.DeepCopy()
	serving.Spec.SignerName = certificatesv1.KubeletServingSignerName
	node := c.DeepCopy()
	node.Spec.Username = deckhousev1.NodeUserPrefix + "n1"
	for name, csr := range map[string]*certificatesv1.CertificateSigningRequest{"another token's": other, "a serving request": serving, "a node's renewal": node} {
		if FromBootstrapper(csr) {
			t.Errorf("%s counts as a node-manager bootstrapper's", name)
		}
	}
}
