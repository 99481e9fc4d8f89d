package instances

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// TestANodeWaitingForTheGroupOfItsJoinGetsItsInstanceWhenTheGroupAppears:
// the group a join decided may not be the one the Node is labelled with,
// so the node is looked at again when that group is created, not only
// when the label's group is.
func TestANodeWaitingForTheGroupOfItsJoinGetsItsInstanceWhenTheGroupAppears(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := manager.NewOptions()
	registered := firstRun.Add(time.Hour)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: deckhousev1.NodeManagerControllerName,
		CreationTimestamp: metav1.NewTime(firstRun)}}
	csr := csrFor(t, "late", deckhousev1.BootstrapUserPrefix+"abcdef",
		[]string{deckhousev1.BootstrappersGroup, deckhousev1.BootstrapperGroup("joined")}, certificatesv1.CertificateApproved)
	csr.CreationTimestamp = metav1.NewTime(registered.Add(-5 * time.Second))
	kube := kubefake.NewClientset(lease, csr, labelled("late", "decoy", registered))
	nm := nmfake.NewSimpleClientset(&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "decoy"}})
	d := manager.NewDepsForClients(kube, nm, opts, clock.RealClock{}, prometheus.NewRegistry())
	d.Recorder = events.NewFakeRecorder(10)
	c := New(d)
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	go c.Run(ctx, 1)

	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll("the node is reported waiting for group joined", func() bool {
		return testutil.ToFloat64(c.metrics.WithoutInstance.WithLabelValues("late", ReasonGroupMissing)) == 1
	})
	if _, err := nm.DeckhouseV1alpha1().Instances().Get(ctx, "late", metav1.GetOptions{}); err == nil {
		t.Fatal("an Instance was made for a group that does not exist")
	}
	if _, err := nm.DeckhouseV1().NodeGroups().Create(ctx, &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "joined"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the Instance pinned to the join's group", func() bool {
		inst, err := nm.DeckhouseV1alpha1().Instances().Get(ctx, "late", metav1.GetOptions{})
		return err == nil && inst.Labels[deckhousev1.NodeGroupLabel] == "joined"
	})
	poll("the node's without-instance series gone", func() bool { return testutil.CollectAndCount(c.metrics.WithoutInstance) == 0 })
}
