package fencing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// A dead node first skipped for one reason and then for another gets an
// Event for each, through the controllers' own recorder: client-go's
// events/v1 broadcaster, which folds Events that differ only in their note
// into one series.
func TestEachReasonANodeIsSkippedForIsItsOwnEvent(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "view-0", Labels: map[string]string{deckhousev1.NodeGroupLabel: "view"}}}
	kube := kubefake.NewClientset(node)
	nm := nmfake.NewSimpleClientset(&deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "view"}})
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clocktesting.NewFakeClock(time.Now()), prometheus.NewRegistry())
	c := New(d, NewOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !d.Start(ctx, "test", c.synced...) {
		t.Fatal("informers did not sync")
	}

	reasons := []string{ReasonNoLease, ReasonStaleAPIView, ReasonClusterOutage}
	for _, r := range reasons {
		c.report(ctx, Decision{Node: "view-0", Group: "view", Reason: r, Message: "node view-0 is not fenced"})
	}
	// Each reason is an Event about the Node and one about its group.
	var got []string
	var all int
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := kube.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got, all = got[:0], len(list.Items)
		for _, e := range list.Items {
			if e.Reason == ReasonSkipped && e.Regarding.Kind == "Node" {
				got = append(got, e.Note)
			}
		}
		return len(got) == len(reasons) && all == 2*len(reasons), nil
	})
	if all != 2*len(reasons) {
		t.Errorf("%d Events, want %d: one about the Node and one about its group per reason", all, 2*len(reasons))
	}
	for _, r := range reasons {
		if !slices.Contains(got, "node view-0 is not fenced ("+r+")") {
			t.Errorf("no %s Event about view-0 saying (%s); the Node's Events say %q (%v)", ReasonSkipped, r, got, err)
		}
	}
}
