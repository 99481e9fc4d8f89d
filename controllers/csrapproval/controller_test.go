package csrapproval

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// approverWith runs the controller's informers over fake clients holding objs.
func approverWith(t *testing.T, kubeObjs []any, nmObjs ...any) (*Controller, *kubefake.Clientset, *nmfake.Clientset) {
	t.Helper()
	kube := kubefake.NewClientset()
	for _, o := range kubeObjs {
		if err := kube.Tracker().Add(o.(*certificatesv1.CertificateSigningRequest)); err != nil {
			t.Fatal(err)
		}
	}
	nm := nmfake.NewSimpleClientset()
	for _, o := range nmObjs {
		var err error
		switch o := o.(type) {
		case *deckhousev1.NodeGroup:
			err = nm.Tracker().Add(o)
		case *deckhousev1alpha1.Instance:
			err = nm.Tracker().Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clocktesting.NewFakeClock(time.Now()), prometheus.NewRegistry())
	c := New(d)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	if !manager.HasSynced(ctx, "test", c.synced...) {
		t.Fatal("informers did not sync")
	}
	return c, kube, nm
}

func ng(name string) *deckhousev1.NodeGroup {
	return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-" + types.UID(name)}}
}

func TestApprovalCreatesTheInstanceBeforeApproving(t *testing.T) {
	req := csr(t, "fresh", "worker")
	req.Name = "node-csr-1"
	c, kube, nm := approverWith(t, []any{req}, ng("worker"))
	if err := c.sync(context.Background(), req.Name); err != nil {
		t.Fatal(err)
	}
	inst, err := nm.DeckhouseV1alpha1().Instances().Get(context.Background(), "fresh", metav1.GetOptions{})
	if err != nil || inst.Labels[deckhousev1.NodeGroupLabel] != "worker" {
		t.Fatalf("Instance of the approved node: %v, %v; want one labelled worker", inst, err)
	}
	got, _ := kube.CertificatesV1().CertificateSigningRequests().Get(context.Background(), req.Name, metav1.GetOptions{})
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != certificatesv1.CertificateApproved {
		t.Fatalf("conditions %+v, want Approved", got.Status.Conditions)
	}
}

// Two tokens racing for one fresh name: the Instance's Create decides, and
// the loser, whose cache did not show the winner's Instance yet, is denied.
func TestTheLoserOfARaceForANameIsDenied(t *testing.T) {
	req := csr(t, "contested", "worker")
	req.Name = "node-csr-2"
	c, kube, nm := approverWith(t, []any{req}, ng("worker"), ng("master"))
	// The other group's Instance lands after the cache was read.
	cl, _ := c.cluster(context.Background())
	d := Decide(req, cl)
	if d.Verdict != Approve || !d.CreateInstance {
		t.Fatalf("setup: want an approval that creates the Instance, got %+v", d)
	}
	if _, err := nm.DeckhouseV1alpha1().Instances().Create(context.Background(), &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{
		Name: "contested", Labels: map[string]string{deckhousev1.NodeGroupLabel: "master"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := c.createInstance(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != Deny || d.Reason != ReasonNodeOfOtherGroup {
		t.Fatalf("got %+v, want Deny %s", d, ReasonNodeOfOtherGroup)
	}
	if err := c.conclude(context.Background(), req, d, certificatesv1.CertificateDenied); err != nil {
		t.Fatal(err)
	}
	got, _ := kube.CertificatesV1().CertificateSigningRequests().Get(context.Background(), req.Name, metav1.GetOptions{})
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != certificatesv1.CertificateDenied {
		t.Fatalf("conditions %+v, want Denied", got.Status.Conditions)
	}
	if inst, _ := nm.DeckhouseV1alpha1().Instances().Get(context.Background(), "contested", metav1.GetOptions{}); inst.Labels[deckhousev1.NodeGroupLabel] != "master" {
		t.Errorf("the winner's Instance was relabelled to %q", inst.Labels[deckhousev1.NodeGroupLabel])
	}
}

// TestASecondRequestForANameIsDeniedNamingTheFirst: two requests of one
// group's token for one fresh name, with different keys (two machines, or
// an attacker racing the real kubelet), before the kubelet registers: the
// first is approved and recorded on the Instance, the second denied,
// naming the first, whether or not the cache shows the Instance yet.
func TestASecondRequestForANameIsDeniedNamingTheFirst(t *testing.T) {
	first, second := csr(t, "twice", "worker"), csr(t, "twice", "worker")
	first.Name, second.Name = "node-csr-first", "node-csr-second"
	c, kube, nm := approverWith(t, []any{first, second}, ng("worker"))
	ctx := context.Background()
	if err := c.sync(ctx, first.Name); err != nil {
		t.Fatal(err)
	}
	inst, err := nm.DeckhouseV1alpha1().Instances().Get(ctx, "twice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, ok := ParseClaim(inst.Annotations)
	if !ok || claim.CSR != first.Name || claim.Token != "abcdef" || !strings.HasPrefix(claim.Key, "sha256:") {
		t.Fatalf("the Instance records %+v (%v); want the first request, its token and key", claim, ok)
	}
	if err := c.sync(ctx, second.Name); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]certificatesv1.RequestConditionType{first.Name: certificatesv1.CertificateApproved, second.Name: certificatesv1.CertificateDenied} {
		got, _ := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != want {
			t.Errorf("CSR %s: conditions %+v, want %s", name, got.Status.Conditions, want)
			continue
		}
		if c := got.Status.Conditions[0]; want == certificatesv1.CertificateDenied && (c.Reason != ReasonNameClaimed || !strings.Contains(c.Message, "CSR "+first.Name)) {
			t.Errorf("CSR %s denied %s: %s; want %s naming CSR %s", name, c.Reason, c.Message, ReasonNameClaimed, first.Name)
		}
	}
}

// TestADecisionReadsTheAPINotALaggingInformer: the Instance and Node of a
// fenced node are gone from the API, but the informers have not seen the
// deletions yet. A token of another group asking for the name is denied
// for the tombstone (the name was another group's), not for an Instance
// that no longer exists: a verdict is final, so it is made on what the API
// holds.
func TestADecisionReadsTheAPINotALaggingInformer(t *testing.T) {
	req := csr(t, "tomb-node", "other")
	req.Name = "node-csr-tomb"
	c, _, _ := approverWith(t, []any{req}, ng("tomb"), ng("other"))
	ctx := context.Background()
	if err := c.tombstones.Record(ctx, "tomb-node", "tomb"); err != nil {
		t.Fatal(err)
	}
	// What the informers still hold.
	stale := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "tomb-node", Labels: map[string]string{deckhousev1.NodeGroupLabel: "tomb"}}}
	if err := c.d.Informers.NodeManager.Deckhouse().V1alpha1().Instances().Informer().GetIndexer().Add(stale); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "tomb-node", Labels: map[string]string{deckhousev1.NodeGroupLabel: "tomb"}}}
	if err := c.d.Informers.Cluster.Core().V1().Nodes().Informer().GetIndexer().Add(node); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, req.Name); err != nil {
		t.Fatal(err)
	}
	got, _ := c.d.Kube.CertificatesV1().CertificateSigningRequests().Get(ctx, req.Name, metav1.GetOptions{})
	if len(got.Status.Conditions) != 1 {
		t.Fatalf("conditions %+v, want one", got.Status.Conditions)
	}
	if cond := got.Status.Conditions[0]; cond.Type != certificatesv1.CertificateDenied || cond.Reason != ReasonNameTombstoned {
		t.Errorf("want Denied %s, got %s %s: %s", ReasonNameTombstoned, cond.Type, cond.Reason, cond.Message)
	}
}
