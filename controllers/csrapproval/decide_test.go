package csrapproval

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
	corev1 "k8s.io/api/core/v1"

	"github.com/node-manager/node-manager/apiserver/access"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// request is a PEM CSR for tmpl, signed by a fresh key.
func request(t *testing.T, tmpl x509.CertificateRequest) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func kubeletRequest(t *testing.T, node string) []byte {
	return request(t, x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}})
}

// csr is a kubelet client CSR for node from a token of group.
func csr(t *testing.T, node, group string) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		Request:    kubeletRequest(t, node),
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
		Username:   "system:bootstrap:abcdef",
		Groups:     []string{"system:bootstrappers", deckhousev1.BootstrappersGroup, access.BootstrapperGroup(group), "system:authenticated"},
	}}
}

// cluster: groups worker and master; node w1 of worker (Instance and
// Node), node m1 of master, node rogue whose Node says master without an
// Instance, node pending with an Instance of worker and no Node yet.
var cluster = Cluster{
	GroupExists: func(g string) bool { return g == "worker" || g == "master" },
	InstanceGroup: func(n string) (string, bool) {
		g, ok := map[string]string{"w1": "worker", "m1": "master", "pending": "worker"}[n]
		return g, ok
	},
	NodeGroup: func(n string) (string, bool) {
		g, ok := map[string]string{"w1": "worker", "m1": "worker" /* relabelled itself */, "rogue": "master"}[n]
		return g, ok
	},
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name     string
		csr      func(t *testing.T) *certificatesv1.CertificateSigningRequest
		verdict  Verdict
		reason   string
		create   bool
		contains string
	}{
		{"a fresh name is approved and gets an Instance of the token's group",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "fresh", "worker") }, Approve, ReasonApproved, true, "node fresh of node group worker"},
		{"a registered node of the token's group is denied: a token may not act as a live node",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "w1", "worker") }, Deny, ReasonNodeExists, false, "delete the Node first"},
		{"an Instance created at approval whose Node has not registered is the same group's",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "pending", "worker") }, Approve, ReasonApproved, false, ""},
		{"an Instance of another group is denied, whatever the Node's label says",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "m1", "worker") }, Deny, ReasonNodeOfOtherGroup, false, `node m1 belongs to node group "master"`},
		{"a Node labelled with another group is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "rogue", "worker") }, Deny, ReasonNodeOfOtherGroup, false, `labelled with node group "master"`},
		{"a token of a group that does not exist is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "fresh", "gone") }, Deny, ReasonUnknownGroup, false, "gone, which does not exist"},
		{"a node-manager token without a node group is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.Groups = []string{"system:bootstrappers", deckhousev1.BootstrappersGroup}
				return c
			}, Deny, ReasonNoNodeGroup, false, "carries no"},
		{"a certificate for another organization is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.Request = request(t, x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:fresh", Organization: []string{"system:masters"}}})
				return c
			}, Deny, ReasonMalformed, false, "organization"},
		{"a certificate for a user that is not a node is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.Request = request(t, x509.CertificateRequest{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:nodes"}}})
				return c
			}, Deny, ReasonMalformed, false, "common name"},
		{"a certificate with alternative names is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.Request = request(t, x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:fresh", Organization: []string{"system:nodes"}}, DNSNames: []string{"fresh"}})
				return c
			}, Deny, ReasonMalformed, false, "alternative names"},
		{"a server-auth usage is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageServerAuth)
				return c
			}, Deny, ReasonMalformed, false, "server auth"},
		{"a request that is not PEM is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.Request = []byte("not a request")
				return c
			}, Deny, ReasonMalformed, false, "PEM"},
		{"a node name that is not a DNS name is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "Bad_Name", "worker") }, Deny, ReasonMalformed, false, "node name"},
		{"another signer is left alone",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.SignerName = certificatesv1.KubeletServingSignerName
				return c
			}, Ignore, "", false, ""},
		{"a node renewing its certificate is left to kube-controller-manager",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "w1", "worker")
				c.Spec.Username, c.Spec.Groups = "system:node:w1", []string{"system:nodes"}
				return c
			}, Ignore, "", false, ""},
		{"another tool's bootstrap token is left alone",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "fresh", "worker")
				c.Spec.Groups = []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"}
				return c
			}, Ignore, "", false, ""},
		{"a decided CSR is left alone",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest {
				c := csr(t, "m1", "worker")
				c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
				return c
			}, Ignore, "", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.csr(t), cluster)
			if d.Verdict != tc.verdict || d.Reason != tc.reason || d.CreateInstance != tc.create || !strings.Contains(d.Message, tc.contains) {
				t.Fatalf("got %+v; want verdict %d, reason %q, create %v, message containing %q", d, tc.verdict, tc.reason, tc.create, tc.contains)
			}
		})
	}
}
