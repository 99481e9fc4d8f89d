package bashible

import (
	"context"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/stack"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	bashibleclient "github.com/node-manager/node-manager/generated/clientset/versioned/typed/bashible/v1alpha1"
)

func createNode(t *testing.T, name, group string) {
	t.Helper()
	labels := map[string]string{}
	if group != "" {
		labels[deckhousev1.NodeGroupLabel] = group
	}
	if _, err := kube.CoreV1().Nodes().Create(stack.TestContext(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func clientFor(t *testing.T, cfg *rest.Config) bashibleclient.BashibleV1alpha1Interface {
	t.Helper()
	return versioned.NewForConfigOrDie(cfg).BashibleV1alpha1()
}

// checkScopedToWorker asserts a caller may get, list and watch worker's
// objects and nothing of master's, with a 403 that says why.
func checkScopedToWorker(t *testing.T, c bashibleclient.BashibleV1alpha1Interface, who string) {
	t.Helper()
	ctx := stack.TestContext(t)
	if _, err := c.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{}); err != nil {
		t.Fatalf("%s reading its own group: %v", who, err)
	}
	if _, err := c.Bashibles().Get(ctx, "ubuntu-lts.worker", metav1.GetOptions{}); err != nil {
		t.Fatalf("%s reading its own group by the legacy name: %v", who, err)
	}
	for _, get := range []func() error{
		func() error { _, err := c.NodeGroupBundles().Get(ctx, "master", metav1.GetOptions{}); return err },
		func() error { _, err := c.Bashibles().Get(ctx, "master", metav1.GetOptions{}); return err },
		func() error { _, err := c.Bootstraps().Get(ctx, "master", metav1.GetOptions{}); return err },
	} {
		err := get()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `may read only node group "worker", not "master"`) {
			t.Errorf("%s reading master: want 403 naming both groups, got %v", who, err)
		}
	}
	list, err := c.NodeGroupBundles().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("%s listing: %v", who, err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "worker" {
		t.Errorf("%s lists %d items, want only worker", who, len(list.Items))
	}

	w, err := c.NodeGroupBundles().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("%s watching: %v", who, err)
	}
	defer w.Stop()
	// Change both groups; only worker's change may reach this caller.
	ngc := createConfig(t, "scope-probe-"+strings.ReplaceAll(strings.ToLower(who), " ", "-")+".sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"*"}, Bundles: []string{"*"}, Weight: 90, Content: "true\n",
	})
	waitConfigProcessed(t, ngc.Name, ngc.Generation)
	seen := map[string]watch.EventType{}
	timeout := time.After(15 * time.Second)
	for len(seen) == 0 || seen["worker"] == "" {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("%s: watch closed", who)
			}
			if m, ok := ev.Object.(metav1.Object); ok {
				seen[m.GetName()] = ev.Type
			}
		case <-timeout:
			t.Fatalf("%s: no MODIFIED event for worker; saw %v", who, seen)
		}
	}
	// Give a stray event for master a moment to arrive.
	select {
	case ev := <-w.ResultChan():
		if m, ok := ev.Object.(metav1.Object); ok {
			seen[m.GetName()] = ev.Type
		}
	case <-time.After(time.Second):
	}
	if seen["worker"] != watch.Modified || seen["master"] != "" {
		t.Errorf("%s watch events: %v, want only worker MODIFIED", who, seen)
	}
}

// createInstance creates the Instance node-manager writes when it approves
// a joining node's certificate ("" makes one without a group).
func createInstance(t *testing.T, name, group string) {
	t.Helper()
	inst := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if group != "" {
		inst.Labels = map[string]string{deckhousev1.NodeGroupLabel: group}
	}
	if _, err := nm.DeckhouseV1alpha1().Instances().Create(stack.TestContext(t), inst, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = nm.DeckhouseV1alpha1().Instances().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func TestNodeReadsOnlyItsGroup(t *testing.T) {
	createNode(t, "node-w1", "worker")
	createInstance(t, "node-w1", "worker")
	cfg, err := cp.NodeConfig("node-w1")
	if err != nil {
		t.Fatal(err)
	}
	c := clientFor(t, cfg)
	stack.Poll(t, "the narrower sees the Instance", func(ctx context.Context) (bool, error) {
		_, err := c.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
		return err == nil, nil
	})
	checkScopedToWorker(t, c, "node node-w1")
}

// TestNodeWithoutInstanceReadsNothing: a node's group is its Instance's,
// which node-manager writes; a Node's own label (a kubelet writes it) counts
// for nothing.
func TestNodeWithoutInstanceReadsNothing(t *testing.T) {
	createNode(t, "node-fresh", "worker")
	createNode(t, "node-unlabelled", "worker")
	createInstance(t, "node-unlabelled", "")
	for name, want := range map[string]string{
		"node-fresh":      `node "node-fresh" has no Instance yet; node-manager creates it when the node joins`,
		"node-ghost":      `node "node-ghost" has no Instance yet`,
		"node-unlabelled": "the Instance of node \"node-unlabelled\" has no node.deckhouse.io/group label",
	} {
		cfg, err := cp.NodeConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		c := clientFor(t, cfg)
		// The Instance without a group may take a moment to reach the narrower.
		stack.Poll(t, name+" is refused with the reason", func(ctx context.Context) (bool, error) {
			_, err := c.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), want), nil
		})
	}
}

// TestNodeCannotWidenItsScopeByRelabelling: a kubelet may edit its own
// Node's labels, so once node-manager has an Instance for the node, the
// Instance's group is what counts.
func TestNodeCannotWidenItsScopeByRelabelling(t *testing.T) {
	ctx := stack.TestContext(t)
	createNode(t, "node-sneaky", "worker")
	inst := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-sneaky", Labels: map[string]string{deckhousev1.NodeGroupLabel: "worker"}}}
	if _, err := nm.DeckhouseV1alpha1().Instances().Create(ctx, inst, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = nm.DeckhouseV1alpha1().Instances().Delete(context.Background(), "node-sneaky", metav1.DeleteOptions{})
	})
	cfg, err := cp.NodeConfig("node-sneaky")
	if err != nil {
		t.Fatal(err)
	}
	// The node moves itself to master with its own credentials.
	patch := []byte(`{"metadata":{"labels":{"node.deckhouse.io/group":"master"}}}`)
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().Patch(ctx, "node-sneaky", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the node relabelling itself (allowed by NodeRestriction): %v", err)
	}
	c := clientFor(t, cfg)
	stack.Poll(t, "the narrower sees the Instance", func(ctx context.Context) (bool, error) {
		_, err := c.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
		return err == nil, nil
	})
	if _, err := c.NodeGroupBundles().Get(ctx, "master", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a relabelled node reading master: want 403, got %v", err)
	}
}

func TestBootstrapTokenReadsOnlyItsGroup(t *testing.T) {
	tok, err := cp.CreateBootstrapToken(stack.TestContext(t), "worker", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cp.BootstrapTokenConfig(tok)
	// The narrower learns of the token from its informer.
	stack.Poll(t, "the token is known", func(ctx context.Context) (bool, error) {
		_, err := clientFor(t, cfg).NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
		return err == nil, nil
	})
	checkScopedToWorker(t, clientFor(t, cfg), "bootstrap token")

	// Nothing about the token ever reaches the server's log.
	if log := replica.Tail(100000); strings.Contains(log, tok.Secret) {
		t.Error("the bootstrap token's secret appears in bashible-apiserver's log")
	}
}
