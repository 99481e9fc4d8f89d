package instances

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
)

var firstRun = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func labelled(name, group string, created time.Time) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{}}}
	if group != "" {
		n.Labels[deckhousev1.NodeGroupLabel] = group
	}
	return n
}

func joined(node, group string, created time.Time) Join {
	return Join{CSR: "node-csr-" + group, Node: node, Group: group, Created: created}
}

func TestEveryNodeWithoutAnInstanceGetsOneOnlyFromWhatNodeManagerDecided(t *testing.T) {
	later := firstRun.Add(24 * time.Hour)
	cases := []struct {
		name   string
		node   *corev1.Node
		joins  []Join
		want   Verdict
		group  string
		reason string
	}{
		{"a node older than node-manager is adopted from its label",
			labelled("n", "worker", firstRun.Add(-time.Hour)), nil, Create, "worker", ReasonAdoptedInstance},
		{"a node older than node-manager without a group label is refused, not silently skipped",
			labelled("n", "", firstRun.Add(-time.Hour)), nil, Refuse, "", ReasonNoGroupLabel},
		{"a node older than node-manager whose group does not exist waits for it",
			labelled("n", "gone", firstRun.Add(-time.Hour)), nil, Wait, "gone", ReasonGroupMissing},
		{"a later node whose certificate a worker token obtained seconds before is a worker, whatever its label says",
			labelled("n", "master", later), []Join{joined("n", "worker", later.Add(-5*time.Second))}, Create, "worker", ReasonJoinedInstance},
		{"a later node whose join CSR was created in the same second",
			labelled("n", "worker", later), []Join{joined("n", "worker", later)}, Create, "worker", ReasonJoinedInstance},
		{"a later node whose join's group does not exist waits for it",
			labelled("n", "gone", later), []Join{joined("n", "gone", later.Add(-time.Second))}, Wait, "gone", ReasonGroupMissing},
		{"a later node with no join is refused, its label is not trusted",
			labelled("n", "worker", later), nil, Refuse, "", ReasonNoInstance},
		{"another node's join decides nothing",
			labelled("n", "worker", later), []Join{joined("other", "worker", later.Add(-time.Second))}, Refuse, "", ReasonNoInstance},
		{"a join made after the Node registered (a token asking for a registered node's certificate) decides nothing",
			labelled("n", "worker", later), []Join{joined("n", "worker", later.Add(time.Second))}, Refuse, "", ReasonNoInstance},
		{"a Node registered again long after its join is not that join's",
			labelled("n", "worker", later), []Join{joined("n", "worker", later.Add(-JoinWindow-time.Second))}, Refuse, "", ReasonNoInstance},
		{"two groups' tokens joined the same name: no group is trusted",
			labelled("n", "worker", later), []Join{joined("n", "worker", later.Add(-2*time.Second)), joined("n", "system", later.Add(-time.Second))},
			Refuse, "", ReasonConflictingJoin},
		{"two joins of the same group (a retried bootstrap) agree",
			labelled("n", "worker", later), []Join{joined("n", "worker", later.Add(-time.Minute)), joined("n", "worker", later.Add(-time.Second))},
			Create, "worker", ReasonJoinedInstance},
		{"while node-manager's first run is unknown, an old node is not adopted from its label",
			labelled("n", "worker", firstRun.Add(-time.Hour)), nil, Refuse, "", ReasonNoInstance},
	}
	for _, c := range cases {
		run := firstRun
		if strings.HasPrefix(c.name, "while node-manager's first run is unknown") {
			run = time.Time{}
		}
		d := Decide(Facts{Node: c.node, FirstRun: run, Joins: c.joins, GroupExists: func(g string) bool { return g != "gone" }})
		if d.Verdict != c.want || d.Group != c.group || d.Reason != c.reason {
			t.Errorf("%s: verdict %d group %q reason %s, want %d %q %s (%s)", c.name, d.Verdict, d.Group, d.Reason, c.want, c.group, c.reason, d.Message)
		}
		if d.Message == "" || !strings.Contains(d.Message, c.node.Name) {
			t.Errorf("%s: the message %q should name the node", c.name, d.Message)
		}
	}
}

func TestRefusalsSayHowToAdmitTheNode(t *testing.T) {
	d := Decide(Facts{Node: labelled("late", "worker", firstRun.Add(time.Hour)), FirstRun: firstRun, GroupExists: func(string) bool { return true }})
	for _, want := range []string{"bootstrap token", "create Instance late labelled " + deckhousev1.NodeGroupLabel + "=<group>", `"worker" is not trusted`} {
		if !strings.Contains(d.Message, want) {
			t.Errorf("message %q lacks %q", d.Message, want)
		}
	}
}

// csrFor is a kubelet client CSR for node asked for by user in groups.
func csrFor(t *testing.T, node, user string, groups []string, conds ...certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: deckhousev1.NodeUserPrefix + node, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-" + node, CreationTimestamp: metav1.NewTime(firstRun)},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Username:   user, Groups: groups,
		},
	}
	for _, c := range conds {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: c, Status: corev1.ConditionTrue})
	}
	return csr
}

func TestJoinIsReadOnlyFromApprovedCSRsOfNodeManagerTokens(t *testing.T) {
	token := deckhousev1.BootstrapUserPrefix + "abcdef"
	ours := []string{"system:bootstrappers", deckhousev1.BootstrappersGroup, deckhousev1.BootstrapperGroup("worker"), "system:authenticated"}
	approved := certificatesv1.CertificateApproved

	j, ok := JoinOf(csrFor(t, "n1", token, ours, approved))
	if !ok || j.Node != "n1" || j.Group != "worker" || j.CSR != "csr-n1" || !j.Created.Equal(firstRun) {
		t.Errorf("an approved CSR of a worker token: %+v %v", j, ok)
	}
	for name, csr := range map[string]*certificatesv1.CertificateSigningRequest{
		"pending":                              csrFor(t, "n1", token, ours),
		"denied":                               csrFor(t, "n1", token, ours, certificatesv1.CertificateDenied),
		"approved, then failed":                csrFor(t, "n1", token, ours, approved, certificatesv1.CertificateFailed),
		"another tool's token (kubeadm)":       csrFor(t, "n1", token, []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"}, approved),
		"a node renewing its own":              csrFor(t, "n1", deckhousev1.NodeUserPrefix+"n1", []string{"system:nodes"}, approved),
		"a node-manager token without a group": csrFor(t, "n1", token, []string{deckhousev1.BootstrappersGroup}, approved),
	} {
		if j, ok := JoinOf(csr); ok {
			t.Errorf("%s: read as a join %+v", name, j)
		}
	}
	other := csrFor(t, "n1", token, ours, approved)
	other.Spec.SignerName = certificatesv1.KubeAPIServerClientSignerName
	if j, ok := JoinOf(other); ok {
		t.Errorf("a CSR for another signer: read as a join %+v", j)
	}
	// What the approver refuses as no kubelet client request is no join
	// either, whoever approved it (one parser: controllers/kubeletcsr).
	serverAuth := csrFor(t, "n1", token, ours, approved)
	serverAuth.Spec.Usages = append(serverAuth.Spec.Usages, certificatesv1.UsageServerAuth)
	if j, ok := JoinOf(serverAuth); ok {
		t.Errorf("an approved request with server auth: read as a join %+v", j)
	}
}
