package apiserver

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	bashibleclient "github.com/node-manager/node-manager/generated/clientset/versioned/typed/bashible/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// checkScopedToWorker asserts a caller may get, list and watch worker's
// objects and nothing of master's, with a 403 that says why.
func checkScopedToWorker(t *testing.T, c bashibleclient.BashibleV1alpha1Interface, who string) {
	t.Helper()
	ctx := framework.Context(t)
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
	ngc := f.TestConfiguration(t, "scope-probe-"+strings.ReplaceAll(strings.ToLower(who), " ", "-")+".sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
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

func TestNodeReadsOnlyItsGroup(t *testing.T) {
	f.TestNode(t, framework.NewNode("node-w1", "worker"))
	f.TestInstance(t, framework.NewInstance("node-w1", "worker"))
	cfg, err := f.CP.NodeConfig("node-w1")
	if err != nil {
		t.Fatal(err)
	}
	c := framework.BashibleClient(cfg)
	framework.Poll(t, "the narrower sees the Instance", func(ctx context.Context) (bool, error) {
		_, err := c.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
		return err == nil, nil
	})
	checkScopedToWorker(t, c, "node node-w1")
}

// TestNodeWithoutInstanceReadsNothing: a node's group is its Instance's,
// which node-manager writes; a Node's own label (a kubelet writes it) counts
// for nothing.
func TestNodeWithoutInstanceReadsNothing(t *testing.T) {
	f.TestNode(t, framework.NewNode("node-fresh", "worker"))
	f.TestNode(t, framework.NewNode("node-unlabelled", "worker"))
	f.TestInstance(t, framework.NewInstance("node-unlabelled", ""))
	for name, want := range map[string]string{
		"node-fresh":      `node "node-fresh" has no Instance yet; node-manager creates it when the node joins`,
		"node-ghost":      `node "node-ghost" has no Instance yet`,
		"node-unlabelled": "the Instance of node \"node-unlabelled\" has no node.deckhouse.io/group label",
	} {
		cfg, err := f.CP.NodeConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		c := framework.BashibleClient(cfg)
		// The Instance without a group may take a moment to reach the narrower.
		framework.Poll(t, name+" is refused with the reason", func(ctx context.Context) (bool, error) {
			_, err := c.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), want), nil
		})
	}
}

// TestNodeCannotWidenItsScopeByRelabelling: a kubelet may edit its own
// Node's labels, so once node-manager has an Instance for the node, the
// Instance's group is what counts.
func TestNodeCannotWidenItsScopeByRelabelling(t *testing.T) {
	ctx := framework.Context(t)
	f.TestNode(t, framework.NewNode("node-sneaky", "worker"))
	inst := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-sneaky", Labels: map[string]string{deckhousev1.NodeGroupLabel: "worker"}}}
	if _, err := f.NM.DeckhouseV1alpha1().Instances().Create(ctx, inst, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().Instances().Delete(context.Background(), "node-sneaky", metav1.DeleteOptions{})
	})
	cfg, err := f.CP.NodeConfig("node-sneaky")
	if err != nil {
		t.Fatal(err)
	}
	// The node moves itself to master with its own credentials.
	patch := []byte(`{"metadata":{"labels":{"node.deckhouse.io/group":"master"}}}`)
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().Patch(ctx, "node-sneaky", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the node relabelling itself (allowed by NodeRestriction): %v", err)
	}
	c := framework.BashibleClient(cfg)
	framework.Poll(t, "the narrower sees the Instance", func(ctx context.Context) (bool, error) {
		_, err := c.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
		return err == nil, nil
	})
	if _, err := c.NodeGroupBundles().Get(ctx, "master", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a relabelled node reading master: want 403, got %v", err)
	}
}

func TestBootstrapTokenReadsOnlyItsGroup(t *testing.T) {
	tok, err := f.CP.CreateBootstrapToken(framework.Context(t), "worker", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.CP.BootstrapTokenConfig(tok)
	// The narrower learns of the token from its informer.
	framework.Poll(t, "the token is known", func(ctx context.Context) (bool, error) {
		_, err := framework.BashibleClient(cfg).NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{})
		return err == nil, nil
	})
	checkScopedToWorker(t, framework.BashibleClient(cfg), "bootstrap token")

	// Nothing about the token ever reaches the server's log.
	if log := replica.Tail(100000); strings.Contains(log, tok.Secret) {
		t.Error("the bootstrap token's secret appears in bashible-apiserver's log")
	}
}
