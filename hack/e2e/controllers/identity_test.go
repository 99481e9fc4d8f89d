package controllers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/controllers/csrapproval"
	"github.com/node-manager/node-manager/controllers/instances"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// pinInstance creates the Instance node-manager's CSR approver creates
// when it approves a joining node's certificate: node pinned to group.
func pinInstance(t *testing.T, node, group string) *deckhousev1alpha1.Instance {
	t.Helper()
	g, err := f.NM.DeckhouseV1().NodeGroups().Get(framework.Context(t), group, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f.TestInstance(t, instances.ForNode(node, g))
}

// neverReads checks for two seconds that cfg is refused group's bundle.
func neverReads(t *testing.T, cfg *rest.Config, group, when string) {
	t.Helper()
	bundles := framework.BashibleClient(cfg).NodeGroupBundles()
	for range 10 {
		_, err := bundles.Get(framework.Context(t), group, metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: the node read node group %s's bundle: want 403, got %v", when, group, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func reads(t *testing.T, cfg *rest.Config, group, when string) {
	t.Helper()
	if _, err := framework.BashibleClient(cfg).NodeGroupBundles().Get(framework.Context(t), group, metav1.GetOptions{}); err != nil {
		t.Errorf("%s: the node reading its own group %s: %v", when, group, err)
	}
}

// TestNodeCannotMoveItselfIntoAnotherGroup: a kubelet may edit its own
// Node's labels; relabelling itself to a group that does not exist, then
// to another group, changes nothing: its Instance is neither deleted nor
// relabelled, and it reads only its own group's bundles.
func TestNodeCannotMoveItselfIntoAnotherGroup(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	newGroup(t, "move-a", nil)
	newGroup(t, "move-b", nil)
	const name = "move-node"
	original := pinInstance(t, name, "move-a")
	cfg, err := f.CP.NodeConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	self := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	// The node registers itself, as its kubelet does.
	if _, err := self.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{deckhousev1.NodeGroupLabel: "move-a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the node registering itself: %v", err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	framework.Poll(t, "the instances controller fills the Instance's status", func(ctx context.Context) (bool, error) {
		inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
		return err == nil && inst.Status.NodeRef != nil, nil
	})
	reads(t, cfg, "move-a", "before relabelling")
	neverReads(t, cfg, "move-b", "before relabelling")

	for _, target := range []string{"move-missing", "move-b"} {
		when := "after the node relabelled itself to " + target
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, deckhousev1.NodeGroupLabel, target)
		if _, err := self.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("the node relabelling itself (NodeRestriction allows it): %v", err)
		}
		// Wait until the controller has looked at the relabelled node: it
		// warns — or, as it once did, it deleted or relabelled the Instance.
		framework.Poll(t, "the controller reacts to the relabelled node", func(ctx context.Context) (bool, error) {
			inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
			if err != nil || inst.UID != original.UID || inst.Labels[deckhousev1.NodeGroupLabel] != "move-a" {
				return true, nil
			}
			return f.HasEventNote(t, name, instances.ReasonGroupMismatch, fmt.Sprintf("%q", target)), nil
		})
		inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("%s: the Instance is gone: %v", when, err)
		case inst.UID != original.UID || inst.Labels[deckhousev1.NodeGroupLabel] != "move-a":
			t.Errorf("%s: the Instance was replaced or relabelled (uid %s, group %q); want the original, pinned to move-a",
				when, inst.UID, inst.Labels[deckhousev1.NodeGroupLabel])
		}
		reads(t, cfg, "move-a", when)
		neverReads(t, cfg, "move-b", when)
	}
}

// certificateRequest creates a kubelet client CSR for node with client
// and returns its name and private key.
func certificateRequest(t *testing.T, client kubernetes.Interface, node string) (string, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := client.CertificatesV1().CertificateSigningRequests().Create(framework.Context(t), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the bootstrap token creating a CSR for %s (system:node-bootstrapper, bound in manifests): %v", node, err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
	})
	return csr.Name, key
}

// decision waits for the CSR to be approved or denied and returns it.
func decision(t *testing.T, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var csr *certificatesv1.CertificateSigningRequest
	framework.Poll(t, "a decision on CSR "+name, func(ctx context.Context) (bool, error) {
		var err error
		csr, err = f.Kube.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(csr.Status.Conditions) > 0, err
	})
	return csr
}

// TestBootstrapTokenObtainsACertificateOnlyForANodeOfItsGroup walks TLS
// bootstrap with the shipped bindings and node-manager's approver: a token
// of one group is denied the certificate of another group's node; for a
// fresh name it is approved, the node's Instance pins it to the token's
// group, and the issued certificate reads only that group's bundles.
func TestBootstrapTokenObtainsACertificateOnlyForANodeOfItsGroup(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	newGroup(t, "csr-a", nil)
	newGroup(t, "csr-b", nil)
	pinInstance(t, "csr-taken", "csr-b")
	tok, err := f.CP.CreateBootstrapToken(ctx, "csr-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := kubernetes.NewForConfigOrDie(f.CP.BootstrapTokenConfig(tok))

	taken, _ := certificateRequest(t, bootstrap, "csr-taken")
	csr := decision(t, taken)
	if c := csr.Status.Conditions[0]; c.Type != certificatesv1.CertificateDenied || c.Reason != csrapproval.ReasonNodeOfOtherGroup ||
		!strings.Contains(c.Message, `node csr-taken belongs to node group "csr-b"`) {
		t.Errorf("a token of csr-a asking for csr-b's node: want Denied %s, got %s %s: %s", csrapproval.ReasonNodeOfOtherGroup, c.Type, c.Reason, c.Message)
	}
	if len(csr.Status.Certificate) > 0 {
		t.Error("a certificate was issued for another group's node")
	}
	if inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, "csr-taken", metav1.GetOptions{}); err != nil || inst.Labels[deckhousev1.NodeGroupLabel] != "csr-b" {
		t.Errorf("the other group's Instance changed: %v", err)
	}

	fresh, key := certificateRequest(t, bootstrap, "csr-fresh")
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().Instances().Delete(context.Background(), "csr-fresh", metav1.DeleteOptions{})
	})
	csr = decision(t, fresh)
	if c := csr.Status.Conditions[0]; c.Type != certificatesv1.CertificateApproved || c.Reason != csrapproval.ReasonApproved {
		t.Fatalf("a token of csr-a asking for a fresh name: want Approved by node-manager (%s), got %s %s: %s",
			csrapproval.ReasonApproved, c.Type, c.Reason, c.Message)
	}
	inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, "csr-fresh", metav1.GetOptions{})
	if err != nil || inst.Labels[deckhousev1.NodeGroupLabel] != "csr-a" || inst.Labels[deckhousev1.ManagedByLabel] == "" {
		t.Fatalf("the approved node's Instance: %v %v; want one pinned to csr-a by node-manager", inst, err)
	}
	var certPEM []byte
	framework.Poll(t, "kube-controller-manager signs the approved CSR", func(ctx context.Context) (bool, error) {
		got, err := f.Kube.CertificatesV1().CertificateSigningRequests().Get(ctx, fresh, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		certPEM = got.Status.Certificate
		return len(certPEM) > 0, nil
	})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.CP.AnonymousConfig()
	cfg.CertData, cfg.KeyData = certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	framework.Poll(t, "the new node reads its group's bundle with its certificate", func(ctx context.Context) (bool, error) {
		_, err := framework.BashibleClient(cfg).NodeGroupBundles().Get(ctx, "csr-a", metav1.GetOptions{})
		return err == nil, nil
	})
	neverReads(t, cfg, "csr-b", "the newly joined node")

	// Nothing else approves node-manager's bootstrappers' CSRs.
	bindings, err := f.Kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		if b.RoleRef.Name != "system:certificates.k8s.io:certificatesigningrequests:nodeclient" {
			continue
		}
		for _, s := range b.Subjects {
			if strings.HasPrefix(s.Name, "system:bootstrappers") {
				t.Errorf("ClusterRoleBinding %s lets kube-controller-manager approve %s's CSRs", b.Name, s.Name)
			}
		}
	}
}

// TestNodeWritesOnlyItsOwnInstanceStatus: the ValidatingAdmissionPolicy
// limits a node to the status of the Instance named like it.
func TestNodeWritesOnlyItsOwnInstanceStatus(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	for _, name := range []string{"vap-a", "vap-b"} {
		// Made by hand (not managed by node-manager), so that no
		// controller touches them while the nodes write.
		f.TestInstance(t, framework.NewInstance(name, "vap"))
	}
	cfg, err := f.CP.NodeConfig("vap-a")
	if err != nil {
		t.Fatal(err)
	}
	asNode := versioned.NewForConfigOrDie(cfg).DeckhouseV1alpha1().Instances()
	patch := fmt.Appendf(nil, `{"status":{"conditions":[{"type":"BashibleReady","status":"True","reason":"Converged","message":"ok","lastTransitionTime":%q}]}}`,
		time.Now().UTC().Format(time.RFC3339))
	_, err = asNode.Patch(ctx, "vap-b", types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node vap-a may write only the status of its own Instance vap-a, not update Instance vap-b/status") {
		t.Errorf("node vap-a patching Instance vap-b's status: want 403 from the policy, got %v", err)
	}
	if _, err := asNode.Patch(ctx, "vap-a", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("node vap-a patching its own Instance's status: %v", err)
	}
	// Of its own Instance's status, a node writes only what bashible
	// reports: a machineRef naming another node's Machine (which
	// node-manager would delete when this Instance goes), another
	// condition type, the phase are node-manager's.
	const forbidden = "a node may write only what bashible reports on its Instance"
	for what, patch := range map[string]string{
		"machineRef":                  `{"status":{"machineRef":{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Machine","name":"victim","namespace":"d8-cloud-instance-manager"}}}`,
		"nodeRef":                     `{"status":{"nodeRef":{"name":"vap-b"}}}`,
		"currentStatus":               `{"status":{"currentStatus":{"phase":"Terminating"}}}`,
		"a condition of its own type": fmt.Sprintf(`{"status":{"conditions":[{"type":"Fenced","status":"True","reason":"Forged","message":"","lastTransitionTime":%q}]}}`, time.Now().UTC().Format(time.RFC3339)),
	} {
		if _, err := asNode.Patch(ctx, "vap-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), forbidden) {
			t.Errorf("node vap-a writing %s of its own Instance: want 403 from the policy, got %v", what, err)
		}
	}
	if _, err := asNode.Patch(ctx, "vap-a", types.MergePatchType,
		[]byte(`{"status":{"bashibleStatus":"Ready","message":"ok","lastRun":{"startTime":"2026-01-01T00:00:00Z","completionTime":"2026-01-01T00:00:01Z","result":"Succeeded"}}}`),
		metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("node vap-a writing bashible's fields of its own Instance: %v", err)
	}
	// Bounded: a node cannot store a megabyte in its Instance.
	big := strings.Repeat("x", 4096)
	var conditions []string
	for i := range 20 {
		conditions = append(conditions, fmt.Sprintf(`{"type":"BashibleReady%d","status":"True","reason":"R","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}`, i))
	}
	for what, patch := range map[string]string{
		"a 4 KiB condition message": fmt.Sprintf(`{"status":{"conditions":[{"type":"BashibleReady","status":"True","reason":"R","message":%q,"lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`, big),
		"a 4 KiB message":           fmt.Sprintf(`{"status":{"message":%q}}`, big),
		"20 conditions":             `{"status":{"conditions":[` + strings.Join(conditions, ",") + `]}}`,
	} {
		if _, err := f.NM.DeckhouseV1alpha1().Instances().Patch(ctx, "vap-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); !apierrors.IsInvalid(err) {
			t.Errorf("writing %s into an Instance's status: want 422 from the CRD's bounds, got %v", what, err)
		}
	}
}

// TestInstanceKeepsItsNodesStatusAndGoesWithTheNode: the Instance made at
// approval gets the node's status once it registers, and is deleted once
// the Node is gone.
func TestInstanceKeepsItsNodesStatusAndGoesWithTheNode(t *testing.T) {
	t.Parallel()
	const group = "inst"
	newGroup(t, group, nil)
	pinInstance(t, "inst-a", group)
	f.TestAgent(t, "inst-a", group)
	framework.Poll(t, "Instance of inst-a", func(ctx context.Context) (bool, error) {
		inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, "inst-a", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return inst.Labels[deckhousev1.NodeGroupLabel] == group && inst.Status.NodeRef != nil && inst.Status.NodeRef.Name == "inst-a" &&
			inst.Status.CurrentStatus != nil && inst.Status.CurrentStatus.Phase == "Running" && inst.Status.BashibleStatus == "Unknown", nil
	})
	if err := f.Kube.CoreV1().Nodes().Delete(framework.Context(t), "inst-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "Instance of a deleted node removed", func(ctx context.Context) (bool, error) {
		_, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, "inst-a", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// TestNodeThatJoinedWithoutApprovalGetsNoInstance: a Node registered after
// node-manager-controller first ran, without node-manager approving its
// certificate, is not adopted from its own label: it gets a Warning Event
// and no Instance, so it reads nothing.
func TestNodeThatJoinedWithoutApprovalGetsNoInstance(t *testing.T) {
	t.Parallel()
	newGroup(t, "late", nil)
	f.TestAgentWithoutInstance(t, "late-node", "late")
	framework.Poll(t, "a Warning Event about the node without an Instance", func(ctx context.Context) (bool, error) {
		return f.HasEventNote(t, "late-node", instances.ReasonNoInstance, "has no Instance"), nil
	})
	if _, err := f.NM.DeckhouseV1alpha1().Instances().Get(framework.Context(t), "late-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Instance of a node node-manager never approved: want none, got %v", err)
	}
}

// TestNodeWhoseInstanceWasLostGetsTheGroupOfItsJoin: a node whose
// certificate node-manager approved for a token of one group, but whose
// Instance was deleted before it registered, gets its Instance back from
// that join — the token's group, not the label it registers with — and
// reads that group's bundle only; the group's status counts it.
func TestNodeWhoseInstanceWasLostGetsTheGroupOfItsJoin(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	const name, group, decoy = "lost-node", "lost", "lost-decoy"
	newGroup(t, group, nil)
	newGroup(t, decoy, nil)
	tok, err := f.CP.CreateBootstrapToken(ctx, group, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	csrName, _ := certificateRequest(t, kubernetes.NewForConfigOrDie(f.CP.BootstrapTokenConfig(tok)), name)
	if c := decision(t, csrName).Status.Conditions[0]; c.Type != certificatesv1.CertificateApproved {
		t.Fatalf("the token's CSR: want Approved, got %s %s: %s", c.Type, c.Reason, c.Message)
	}
	// A person deletes the Instance before the kubelet registers.
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().Instances().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if err := f.NM.DeckhouseV1alpha1().Instances().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the Instance made at approval: %v", err)
	}
	framework.Poll(t, "the Instance is gone", func(ctx context.Context) (bool, error) {
		_, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	cfg, err := f.CP.NodeConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet registers, labelled (as it may label itself) with another group.
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{deckhousev1.NodeGroupLabel: decoy}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the node registering itself: %v", err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })

	framework.Poll(t, "an Instance pinned to the token's group", func(ctx context.Context) (bool, error) {
		inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if g := inst.Labels[deckhousev1.NodeGroupLabel]; g != group {
			return false, fmt.Errorf("the Instance pins the node to %q, want the token's group %q (never the Node's label)", g, group)
		}
		return true, nil
	})
	framework.Poll(t, "an "+instances.ReasonJoinedInstance+" Event naming the CSR", func(ctx context.Context) (bool, error) {
		return f.HasEventNote(t, name, instances.ReasonJoinedInstance, csrName), nil
	})
	reads(t, cfg, group, "after its Instance came back from its join")
	neverReads(t, cfg, decoy, "after its Instance came back from its join")
	framework.Poll(t, "the group's status counts the Instance and leaves desired unset", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ng.Status.Desired != nil || ng.Status.Min != nil || ng.Status.Max != nil {
			return false, fmt.Errorf("a Static group joined by hand shows desired/min/max %v/%v/%v; want them unset", ng.Status.Desired, ng.Status.Min, ng.Status.Max)
		}
		return ng.Status.Instances != nil && *ng.Status.Instances == 1, nil
	})
}

// TestNodeWritesEventsOnlyAboutItself: the halt of a rollout quotes the
// last output of a node's BashibleStepFailed Event, so a node may write
// Events about Nodes only about itself (the policy
// d8-node-manager-node-events-own-node), through either Events API, and
// may not turn another node's Event into its own; Events about itself and
// about other kinds (a kubelet's about its pods) stay allowed.
func TestNodeWritesEventsOnlyAboutItself(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	const self, victim = "ev-self", "ev-victim"
	cfg, err := f.CP.NodeConfig(self)
	if err != nil {
		t.Fatal(err)
	}
	asNode := kubernetes.NewForConfigOrDie(cfg)
	about := func(kind, name string) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: metav1.NamespaceDefault},
			EventTime: metav1.NewMicroTime(time.Now()), ReportingController: "bashible", ReportingInstance: self, Action: "Converge",
			Type: corev1.EventTypeWarning, Reason: "BashibleStepFailed", Note: "step 050_x failed; last output: forged by " + self,
			Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: kind, Name: name}}
	}
	cleanup := func(name string) {
		t.Cleanup(func() {
			_ = f.Kube.EventsV1().Events(metav1.NamespaceDefault).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	forbidden := "node " + self + " may write Events only about its own Node, not about Node " + victim
	if ev, err := asNode.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, about("Node", victim), metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), forbidden) {
		if err == nil {
			cleanup(ev.Name)
		}
		t.Errorf("node %s creating an events.k8s.io Event about Node %s: want 403 (%s), got %v", self, victim, forbidden, err)
	}
	now := metav1.Now()
	core := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: victim}, Reason: "BashibleStepFailed",
		Message: "last output: forged", Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "bashible", Host: self},
		FirstTimestamp: now, LastTimestamp: now, Count: 1}
	if ev, err := asNode.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, core, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), forbidden) {
		if err == nil {
			cleanup(ev.Name)
		}
		t.Errorf("node %s creating a core/v1 Event about Node %s: want 403 (%s), got %v", self, victim, forbidden, err)
	}
	own, err := asNode.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, about("Node", self), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node %s creating an Event about itself: %v", self, err)
	}
	cleanup(own.Name)
	pod, err := asNode.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, about("Pod", "some-pod"), metav1.CreateOptions{})
	if err != nil {
		t.Errorf("node %s creating an Event about a pod (as a kubelet does): %v", self, err)
	} else {
		cleanup(pod.Name)
	}
	// The victim's own Event may not be taken over (nor its object changed).
	theirs := about("Node", victim)
	theirs.ReportingInstance = victim
	theirs, err = f.Kube.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, theirs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cleanup(theirs.Name)
	// Only an Event's series may change; even that is refused.
	theirs.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(time.Now())}
	if _, err := asNode.EventsV1().Events(metav1.NamespaceDefault).Update(ctx, theirs, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node %s rewriting an Event about Node %s: want 403, got %v", self, victim, err)
	}
}

// TestASecondCertificateRequestForANameIsDeniedNamingTheFirst: two
// requests of one group's token for one name with different keys, before
// the kubelet registers (two machines given one name, or someone racing
// the real kubelet with a leaked token): the first is approved and
// recorded on the Instance, the second is denied, naming the first.
func TestASecondCertificateRequestForANameIsDeniedNamingTheFirst(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	const group, name = "claim", "claim-node"
	newGroup(t, group, nil)
	tok, err := f.CP.CreateBootstrapToken(ctx, group, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := kubernetes.NewForConfigOrDie(f.CP.BootstrapTokenConfig(tok))
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().Instances().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	first, _ := certificateRequest(t, bootstrap, name)
	if c := decision(t, first).Status.Conditions[0]; c.Type != certificatesv1.CertificateApproved {
		t.Fatalf("the first request: want Approved, got %s %s: %s", c.Type, c.Reason, c.Message)
	}
	inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !strings.Contains(inst.Annotations[deckhousev1.ApprovedRequestAnnotation], first) {
		t.Errorf("the Instance records %q (%v); want the first request %s", inst.Annotations[deckhousev1.ApprovedRequestAnnotation], err, first)
	}
	second, _ := certificateRequest(t, bootstrap, name)
	csr := decision(t, second)
	if c := csr.Status.Conditions[0]; c.Type != certificatesv1.CertificateDenied || c.Reason != csrapproval.ReasonNameClaimed ||
		!strings.Contains(c.Message, "CSR "+first) {
		t.Errorf("a second request for %s: want Denied %s naming CSR %s, got %s %s: %s", name, csrapproval.ReasonNameClaimed, first, c.Type, c.Reason, c.Message)
	}
	if len(csr.Status.Certificate) > 0 {
		t.Error("a second certificate was issued for the name")
	}
}

// TestAFencedNodesNameCannotBeClaimedByAnotherGroup: once a node is gone
// (fencing deletes its Node, node-manager then its Instance), a token of
// another group may not obtain a certificate under its name: the name is
// remembered as its group's. A token of its own group may (the machine
// reinstalled).
func TestAFencedNodesNameCannotBeClaimedByAnotherGroup(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	const group, other, name = "tomb", "tomb-other", "tomb-node"
	newGroup(t, group, nil)
	newGroup(t, other, nil)
	token := func(group string) kubernetes.Interface {
		tok, err := f.CP.CreateBootstrapToken(ctx, group, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(f.CP.BootstrapTokenConfig(tok))
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().Instances().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	joined, _ := certificateRequest(t, token(group), name)
	if c := decision(t, joined).Status.Conditions[0]; c.Type != certificatesv1.CertificateApproved {
		t.Fatalf("the join: want Approved, got %s %s: %s", c.Type, c.Reason, c.Message)
	}
	cfg, err := f.CP.NodeConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{deckhousev1.NodeGroupLabel: group}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the node registering itself: %v", err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	framework.Poll(t, "the Instance knows its Node", func(ctx context.Context) (bool, error) {
		inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
		return err == nil && inst.Status.NodeRef != nil, nil
	})
	// Fenced: the fencing controller deletes the Node (as it does, guarded
	// by its UID); node-manager deletes the Instance.
	if err := f.Kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &node.UID}}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the Instance of the fenced node is gone", func(ctx context.Context) (bool, error) {
		_, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	claim, _ := certificateRequest(t, token(other), name)
	csr := decision(t, claim)
	if c := csr.Status.Conditions[0]; c.Type != certificatesv1.CertificateDenied || c.Reason != csrapproval.ReasonNameTombstoned ||
		!strings.Contains(c.Message, fmt.Sprintf("node %s of node group %q was deleted", name, group)) {
		t.Errorf("a token of %s claiming the fenced node's name: want Denied %s naming group %s, got %s %s: %s",
			other, csrapproval.ReasonNameTombstoned, group, c.Type, c.Reason, c.Message)
	}
	if len(csr.Status.Certificate) > 0 {
		t.Error("a certificate was issued to another group's token for the fenced node's name")
	}
	if inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Errorf("the fenced node's name got an Instance of group %q", inst.Labels[deckhousev1.NodeGroupLabel])
	}
	again, _ := certificateRequest(t, token(group), name)
	if c := decision(t, again).Status.Conditions[0]; c.Type != certificatesv1.CertificateApproved {
		t.Errorf("a token of the node's own group (a reinstalled machine): want Approved, got %s %s: %s", c.Type, c.Reason, c.Message)
	}
}

// TestARelabelledNodeLeavesTheOtherGroupAlone: a node of one group whose
// kubelet labels it into another (a gated group with canaries, as master
// would be), asks for an update there and, once approved, reports that
// group's configuration and goes NotReady, as if to halt its rollout. Its
// group is its Instance's: the other group's status does not count it,
// its rollout never approves it and is not halted, and the node is warned
// about.
func TestARelabelledNodeLeavesTheOtherGroupAlone(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	const victim, own, rogue = "relabel-victim", "relabel-own", "relabel-rogue"
	newGroup(t, victim, func(s *deckhousev1.NodeGroupSpec) {
		mc := intstr.FromInt32(1)
		s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &mc, Canaries: ptr.To(int32(1)), SoakTime: &metav1.Duration{Duration: time.Second}}
	})
	newGroup(t, own, nil)
	f.TestAgent(t, victim+"-0", victim)
	f.TestAgent(t, victim+"-1", victim)
	r := f.TestAgent(t, rogue, own)
	f.WaitRolledOut(t, victim, f.Checksum(t, victim), 2)
	f.WaitRolledOut(t, own, f.Checksum(t, own), 1)

	// The rogue's kubelet, with its own identity, moves its Node into the
	// victim group and asks for an update there.
	r.Paused.Store(true)
	cfg, err := f.CP.NodeConfig(rogue)
	if err != nil {
		t.Fatal(err)
	}
	self := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q},"annotations":{%q:"",%q:null}}}`,
		deckhousev1.NodeGroupLabel, victim, deckhousev1.WaitingForApprovalAnnotation, deckhousev1.ConfigurationChecksumAnnotation)
	if _, err := self.Patch(ctx, rogue, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the node relabelling itself (NodeRestriction allows it): %v", err)
	}
	framework.Poll(t, "the relabelled node is warned about", func(ctx context.Context) (bool, error) {
		return f.HasEventNote(t, rogue, instances.ReasonGroupMismatch, fmt.Sprintf("%q", victim)), nil
	})
	sum := f.NewConfiguration(t, victim, "echo relabel\n")
	// Approved into the victim's rollout, it would report the victim's
	// configuration and go NotReady: the canary's failure halts a rollout.
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			n, err := f.Kube.CoreV1().Nodes().Get(ctx, rogue, metav1.GetOptions{})
			if err != nil || !nodes.Has(n, deckhousev1.ApprovedAnnotation) {
				return false, nil
			}
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q,%q:null}}}`,
				deckhousev1.ConfigurationChecksumAnnotation, sum, deckhousev1.WaitingForApprovalAnnotation)
			_, err = self.Patch(ctx, rogue, types.MergePatchType, patch, metav1.PatchOptions{})
			r.Ready.Store(false)
			return err == nil, nil
		})
	}()
	f.WaitRolledOut(t, victim, sum, 2)
	ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (Its own group may approve it: it asked for an update, and is its.)
	if r := approval.ParseRollout(ng); slices.Contains(r.Canaries, rogue) || slices.Contains(r.Batch, rogue) {
		t.Errorf("the relabelled node took part in %s's rollout: canaries %v, batch %v", victim, r.Canaries, r.Batch)
	}
	if ng.Status.Nodes != 2 {
		t.Errorf("%s's status counts %d nodes, want its 2: the relabelled node is %s's", victim, ng.Status.Nodes, own)
	}
	if h := meta.FindStatusCondition(ng.Status.Conditions, approval.ConditionRolloutHalted); h != nil && h.Status == metav1.ConditionTrue {
		t.Errorf("%s's rollout halted: %s", victim, h.Message)
	}
	if ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, own, metav1.GetOptions{}); err != nil || ng.Status.Nodes != 1 {
		t.Errorf("%s's status: %v; want its 1 node counted, whatever its label says", own, err)
	}
}

// TestNodeWritesOnlyItsOwnNodeUserError: a node reports why a NodeUser's
// user could not be made on it in the NodeUser's status.errors under its
// own name (as bashible's node-users step does), and the
// ValidatingAdmissionPolicy keeps it to that key: it cannot write or
// remove another node's entry, change the NodeUser, create or delete one.
func TestNodeWritesOnlyItsOwnNodeUserError(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	user := &deckhousev1.NodeUser{ObjectMeta: metav1.ObjectMeta{Name: "vap-user"}, Spec: deckhousev1.NodeUserSpec{UID: 1100,
		SSHPublicKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDWXs6ivnQQ1yIwbmB4Om9p0CXUsImyNTFBYpTdnkZKl"}, PasswordHash: "!", NodeGroups: []string{"vap-none"}}}
	if _, err := f.NM.DeckhouseV1().NodeUsers().Create(ctx, user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1().NodeUsers().Delete(context.Background(), user.Name, metav1.DeleteOptions{})
	})
	// Another node's entry, written by the administrator.
	if _, err := f.NM.DeckhouseV1().NodeUsers().Patch(ctx, user.Name, types.MergePatchType, []byte(`{"status":{"errors":{"nu-b":"uid taken"}}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.CP.NodeConfig("nu-a")
	if err != nil {
		t.Fatal(err)
	}
	asNode := versioned.NewForConfigOrDie(cfg).DeckhouseV1().NodeUsers()
	patch := func(body string) error {
		_, err := asNode.Patch(ctx, user.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
		return err
	}
	if err := patch(`{"status":{"errors":{"nu-a":"User bob already exists with UID 1001, expected UID 1100"}}}`); err != nil {
		t.Fatalf("node nu-a writing its own entry: %v", err)
	}
	if err := patch(`{"status":{"errors":{"nu-a":null}}}`); err != nil {
		t.Fatalf("node nu-a removing its own entry: %v", err)
	}
	const other = "node nu-a may write only its own entry of NodeUser vap-user's status.errors (the key nu-a), not another node's"
	for what, body := range map[string]string{
		"another node's entry":           `{"status":{"errors":{"nu-b":"all is well"}}}`,
		"removing another node's entry":  `{"status":{"errors":{"nu-b":null}}}`,
		"a new entry for some other key": `{"status":{"errors":{"nu-c":"x"}}}`,
	} {
		if err := patch(body); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), other) {
			t.Errorf("node nu-a writing %s: want 403 from the policy, got %v", what, err)
		}
	}
	if _, err := asNode.Patch(ctx, user.Name, types.MergePatchType, []byte(`{"spec":{"isSudoer":true}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node nu-a changing a NodeUser's spec: want 403, got %v", err)
	}
	if err := asNode.Delete(ctx, user.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node nu-a deleting a NodeUser: want 403, got %v", err)
	}
	got, err := f.NM.DeckhouseV1().NodeUsers().Get(ctx, user.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Errors) != 1 || got.Status.Errors["nu-b"] != "uid taken" || got.Spec.IsSudoer {
		t.Errorf("the NodeUser after the node's writes: errors %v, isSudoer %v", got.Status.Errors, got.Spec.IsSudoer)
	}
}
