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
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/instances"
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
		Groups:     []string{"system:bootstrappers", deckhousev1.BootstrappersGroup, deckhousev1.BootstrapperGroup(group), "system:authenticated"},
	}}
}

// cluster: groups worker and master; node w1 of worker (Instance and
// Node), node m1 of master, node rogue whose Node says master without an
// Instance, node pending with an Instance of worker and no Node yet.
// Node claimed has an Instance of worker recording an approved request
// (firstClaim) and no Node yet; node fenced of master was deleted a
// moment ago (a tombstone), as was node gone of worker.
var cluster = Cluster{
	GroupExists: func(g string) bool { return g == "worker" || g == "master" },
	Instance: func(n string) (string, map[string]string, bool) {
		if n == "claimed" {
			return "worker", map[string]string{deckhousev1.ApprovedRequestAnnotation: firstClaim.Encode()}, true
		}
		g, ok := map[string]string{"w1": "worker", "m1": "master", "pending": "worker"}[n]
		return g, nil, ok
	},
	NodeGroup: func(n string) (string, bool) {
		g, ok := map[string]string{"w1": "worker", "m1": "worker" /* relabelled itself */, "rogue": "master"}[n]
		return g, ok
	},
	Tombstone: func(n string) (instances.Tombstone, bool) {
		g, ok := map[string]string{"fenced": "master", "gone": "worker"}[n]
		return instances.Tombstone{Group: g, DeletedAt: metav1.NewTime(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))}, ok
	},
}

var firstClaim = Claim{CSR: "node-csr-first", Token: "abcdef", Key: "sha256:0123"}

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
		{"a second request for a name whose approved request has not registered is denied, naming the first",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "claimed", "worker") }, Deny, ReasonNameClaimed, false,
			"already has an approved certificate request, CSR node-csr-first of bootstrap token abcdef (key sha256:0123)"},
		{"the name of another group's node deleted a moment ago (fenced) is denied",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "fenced", "worker") }, Deny, ReasonNameTombstoned, false,
			`node fenced of node group "master" was deleted at 2026-11-27T12:00:00Z`},
		{"the name of the token's own group's deleted node is approved (a reinstalled machine)",
			func(t *testing.T) *certificatesv1.CertificateSigningRequest { return csr(t, "gone", "worker") }, Approve, ReasonApproved, true, "node gone of node group worker"},
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
			if d.Verdict == Approve && (d.Claim == nil || !strings.HasPrefix(d.Claim.Key, "sha256:") || d.Claim.Token != "abcdef") {
				t.Errorf("an approval records claim %+v; want the request's key and token", d.Claim)
			}
		})
	}
}

// TestTheSameKeyAskingAgainIsApproved: a kubelet that asks again with the
// key of the approved request (its first CSR lost, say) is the same
// claimant; any other key is not.
func TestTheSameKeyAskingAgainIsApproved(t *testing.T) {
	first := csr(t, "again", "worker")
	first.Name = "node-csr-1"
	d := Decide(first, withInstance(cluster, "again", nil))
	if d.Verdict != Approve || d.Claim == nil {
		t.Fatalf("the first request: %+v; want an approval that records its claim", d)
	}
	recorded := map[string]string{deckhousev1.ApprovedRequestAnnotation: d.Claim.Encode()}
	retry := first.DeepCopy()
	retry.Name = "node-csr-2"
	if d := Decide(retry, withInstance(cluster, "again", recorded)); d.Verdict != Approve || d.Claim != nil {
		t.Errorf("the same key again: %+v; want approved, nothing new to record", d)
	}
	other := csr(t, "again", "worker")
	if d := Decide(other, withInstance(cluster, "again", recorded)); d.Verdict != Deny || d.Reason != ReasonNameClaimed || !strings.Contains(d.Message, "CSR node-csr-1") {
		t.Errorf("another key: %+v; want denied %s naming CSR node-csr-1", d, ReasonNameClaimed)
	}
}

// withInstance is c with an Instance of worker named node, annotated so.
func withInstance(c Cluster, node string, annotations map[string]string) Cluster {
	inner := c.Instance
	c.Instance = func(n string) (string, map[string]string, bool) {
		if n == node {
			return "worker", annotations, true
		}
		return inner(n)
	}
	return c
}
