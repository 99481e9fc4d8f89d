package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

func fleetNodeWithReady(name string, status corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: rolloutGroup}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
}

// markUnknown does what kube-controller-manager's node lifecycle
// controller does to a node whose Lease was renewed too late.
func markUnknown(t *testing.T, kube *fake.Clientset, name string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}}}})
	if _, err := kube.CoreV1().Nodes().Patch(context.Background(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("marking %s Unknown: %v", name, err)
	}
}

func ready(t *testing.T, kube *fake.Clientset, name string) bool {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return nodes.IsReady(n)
}

func TestKubeletReportsANodeMarkedNotReadyReadyAgainAfterItsStatusLoop(t *testing.T) {
	t.Parallel()
	kube := fake.NewClientset(fleetNodeWithReady("node-00000", corev1.ConditionTrue), fleetNodeWithReady("node-00001", corev1.ConditionTrue))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const every = 300 * time.Millisecond
	k, err := runKubelets(ctx, kube, every, true)
	if err != nil {
		t.Fatal(err)
	}
	marked := time.Now()
	markUnknown(t, kube, "node-00000")
	// The kubelet counts its report once the update returns, which may be
	// after the update is visible here: wait for both.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return ready(t, kube, "node-00000") && k.reported.Load() > 0, nil
	}); err != nil {
		t.Fatalf("node-00000, marked not Ready, was not reported Ready again: %v (reported %d)", err, k.reported.Load())
	}
	if took := time.Since(marked); took < every {
		t.Errorf("reported Ready again after %s: a kubelet notices at its next status loop, not before %s", took, every)
	}
	if k.marked.Load() != 1 || k.reported.Load() != 1 {
		t.Errorf("marked %d, reported %d; want 1, 1", k.marked.Load(), k.reported.Load())
	}
	if !ready(t, kube, "node-00001") {
		t.Error("node-00001 was never marked and is not Ready")
	}
}

func TestKubeletsThatDoNotRestoreOnlyCount(t *testing.T) {
	t.Parallel()
	kube := fake.NewClientset(fleetNodeWithReady("node-00000", corev1.ConditionTrue))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, err := runKubelets(ctx, kube, 10*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	markUnknown(t, kube, "node-00000")
	// Another change of the node while it is not Ready (a taint, an
	// annotation) is not another mark.
	if _, err := kube.CoreV1().Nodes().Patch(ctx, "node-00000", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n, ok, _ := k.store.GetByKey("node-00000")
		return ok && k.notReady() == 1 && n.(*corev1.Node).Annotations["example"] == "x", nil
	}); err != nil {
		t.Fatalf("the changes were not seen: not Ready %d", k.notReady())
	}
	if k.marked.Load() != 1 {
		t.Errorf("marked %d times; want 1 (one turn from Ready to not Ready)", k.marked.Load())
	}
	time.Sleep(200 * time.Millisecond) // twenty status loops: none may report
	if ready(t, kube, "node-00000") || k.reported.Load() != 0 {
		t.Errorf("with -kubelet-status=false the node was reported Ready again (%d reports)", k.reported.Load())
	}
}
