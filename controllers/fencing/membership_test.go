package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// TestARelabelledNodeIsCountedInItsOwnGroup: a worker whose kubelet
// labelled its Node master (NodeRestriction allows it) is neither counted
// in master's size, which bounds how many of master's nodes may be fenced
// at once, nor fenced or held as master's: its group is its Instance's.
func TestARelabelledNodeIsCountedInItsOwnGroup(t *testing.T) {
	fenced := func(name, label string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			deckhousev1.NodeGroupLabel: label, deckhousev1.FencingEnabledLabel: ""}}}
	}
	instance := func(name, group string) *deckhousev1alpha1.Instance {
		return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: group}}}
	}
	kube := kubefake.NewClientset(fenced("master-0", "master"), fenced("master-1", "master"), fenced("worker-0", "master" /* relabelled itself */))
	spec := deckhousev1.NodeGroupSpec{Fencing: &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog}}
	nm := nmfake.NewSimpleClientset([]runtime.Object{
		&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "master"}, Spec: spec},
		&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: spec},
		instance("master-0", "master"), instance("master-1", "master"), instance("worker-0", "worker"),
	}...)
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clocktesting.NewFakeClock(time.Now()), prometheus.NewRegistry())
	c := New(d, NewOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !d.Start(ctx, "test", c.synced...) {
		t.Fatal("informers did not sync")
	}
	f, _, err := c.facts()
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Groups["master"].Size; got != 2 {
		t.Errorf("master's size is %d, want 2: the relabelled worker is not master's", got)
	}
	if got := f.Groups["worker"].Size; got != 1 {
		t.Errorf("worker's size is %d, want 1", got)
	}
	for _, n := range f.Nodes {
		if n.Name == "worker-0" && n.Group != "worker" {
			t.Errorf("worker-0 is fenced as a node of %q, want worker (its Instance's group)", n.Group)
		}
	}
}
