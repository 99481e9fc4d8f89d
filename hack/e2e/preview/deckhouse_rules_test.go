package preview

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestContainerdV2IsRefusedWhileAGroupNodeCannotRunIt: the real
// kube-apiserver calls the nodegroup-policy webhook for a change of
// cri.type, and bashible-apiserver refuses it with Deckhouse's message
// while one of the group's nodes (by its Instance) carries
// node.deckhouse.io/containerd-v2-unsupported; a Node that only claims
// the group in its own label does not count.
func TestContainerdV2IsRefusedWhileAGroupNodeCannotRunIt(t *testing.T) {
	ctx := framework.Context(t)
	unsupported := map[string]string{deckhousev1.NodeGroupLabel: "worker", deckhousev1.ContainerdV2UnsupportedLabel: ""}
	// stray has no Instance of worker: its own label does not make it one of worker's nodes.
	for _, name := range []string{"stray", "worker-0"} {
		if _, err := f.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: unsupported}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	ng := `{"apiVersion":"deckhouse.io/v1","kind":"NodeGroup","metadata":{"name":"worker"},"spec":{"nodeType":"Static","cri":{"type":"ContainerdV2"}}}`
	want := `It is forbidden for NodeGroup "worker" to use CRI ContainerdV2 because it contains nodes that do not support ContainerdV2. ` +
		"You can list them with: kubectl get node -l node.deckhouse.io/containerd-v2-unsupported,node.deckhouse.io/group=worker"
	var out string
	framework.Poll(t, "the change refused with Deckhouse's message", func(context.Context) (bool, error) {
		var err error
		out, err = applyOutput(t, ng, "--dry-run=server")
		return err != nil && strings.Contains(out, want), nil
	})
	if !strings.Contains(out, bashiblev1alpha1.NodeGroupPolicyWebhookName) {
		t.Errorf("the refusal should name the webhook %s:\n%s", bashiblev1alpha1.NodeGroupPolicyWebhookName, out)
	}

	// worker-0 reports it can run containerd 2 now: only stray is left,
	// which is not worker's, and the change is admitted.
	if _, err := f.Kube.CoreV1().Nodes().Patch(ctx, "worker-0", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"`+deckhousev1.ContainerdV2UnsupportedLabel+`":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the change admitted", func(context.Context) (bool, error) {
		out, err := applyOutput(t, ng, "--dry-run=server")
		return err == nil && strings.Contains(out, "(server dry run)"), nil
	})
}

// TestDeckhousesWarningsReachKubectl: a master runtime change with one API
// endpoint and a maxPods the pod subnet cannot hold twice over are
// warned about, in Deckhouse's words.
func TestDeckhousesWarningsReachKubectl(t *testing.T) {
	ng := `{"apiVersion":"deckhouse.io/v1","kind":"NodeGroup","metadata":{"name":"master"},"spec":{"nodeType":"Static","cri":{"type":"NotManaged"},"kubelet":{"maxPods":300}}}`
	out := dryRunWarnings(t, ng)
	for _, want := range []string{
		"Warning: .spec.kubelet.maxPods (300) is too high: may lead to IP exhaustion",
		"Warning: it is disruptive to change cri.type in master node group for cluster with apiserver endpoints < 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply --dry-run=server printed no %q:\n%s", want, out)
		}
	}
}
