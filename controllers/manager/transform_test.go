package manager

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

var managed = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1"}}

// TestInformersKeepNeitherManagedFieldsNorNodeImages: every factory of
// the controller stores objects without managedFields, and Nodes without
// their image lists; what the controllers read stays.
func TestInformersKeepNeitherManagedFieldsNorNodeImages(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "w1", ManagedFields: managed, Labels: map[string]string{deckhousev1.NodeGroupLabel: "worker"}},
		Status: corev1.NodeStatus{
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/pause@sha256:0"}, SizeBytes: 1}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	group := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker", ManagedFields: managed}}
	opts := NewOptions()
	opts.Identity = "test"
	d := NewDepsForClients(kubefake.NewClientset(node), nmfake.NewClientset(group), opts, clock.RealClock{}, prometheus.NewRegistry())
	nodes := d.Informers.Cluster.Core().V1().Nodes()
	groups := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	_, _ = nodes.Informer(), groups.Informer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.Informers.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced, groups.Informer().HasSynced) {
		t.Fatal("informers did not sync")
	}
	n, err := nodes.Lister().Get("w1")
	if err != nil {
		t.Fatal(err)
	}
	if n.ManagedFields != nil || n.Status.Images != nil {
		t.Errorf("the cached Node keeps managedFields %v and images %v", n.ManagedFields, n.Status.Images)
	}
	if n.Labels[deckhousev1.NodeGroupLabel] != "worker" || len(n.Status.Conditions) != 1 {
		t.Errorf("the cached Node lost what the controllers read: %+v", n)
	}
	g, err := groups.Lister().Get("worker")
	if err != nil {
		t.Fatal(err)
	}
	if g.ManagedFields != nil {
		t.Errorf("the cached NodeGroup keeps managedFields %v", g.ManagedFields)
	}
}

func TestSlimPassesWhatIsNotAnObject(t *testing.T) {
	tomb := cache.DeletedFinalStateUnknown{Key: "w1"}
	got, err := slim(tomb)
	if err != nil || got != tomb {
		t.Errorf("slim(%v) = %v, %v; want it unchanged", tomb, got, err)
	}
}

// TestSlimLeavesItsInputAlone: the fields are dropped from a copy; the
// object handed in (which a fake clientset shares with its store) keeps
// them.
func TestSlimLeavesItsInputAlone(t *testing.T) {
	in := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", ManagedFields: managed},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"pause"}}}}}
	got, err := slim(in)
	if err != nil {
		t.Fatal(err)
	}
	out := got.(*corev1.Node)
	if out == in || out.ManagedFields != nil || out.Status.Images != nil || out.Name != "w1" {
		t.Errorf("slim returned %+v", out)
	}
	if in.ManagedFields == nil || in.Status.Images == nil {
		t.Errorf("slim wrote to its input: %+v", in)
	}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}}
	if got, _ := slim(plain); got != plain {
		t.Error("an object with nothing to drop should pass as it is")
	}
}
