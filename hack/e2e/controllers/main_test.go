// Package controllers is the e2e suite of node-manager-controller: the
// real binary (as its ServiceAccount, with the manifests' RBAC) against a
// local control plane and a registered bashible-apiserver, with nodes
// played by Go agents that follow bashible's protocol — and, in one test,
// by the real bashible.sh.
package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	env  *stack.Environment
	cp   *controlplane.ControlPlane
	kube kubernetes.Interface
	nm   versioned.Interface
	// ctrl is the controller the tests run against; the failover test
	// replaces it with the survivor.
	ctrl *stack.Controller
)

// controllerArgs make drains quick to observe.
var controllerArgs = []string{"--eviction-retry-interval=1s", "--default-drain-timeout=30s"}

func TestMain(m *testing.M) { os.Exit(stack.RunSuite(m, setUp)) }

func setUp(ctx context.Context, e *stack.Environment) (func(), error) {
	env, cp = e, e.CP
	kube = kubernetes.NewForConfigOrDie(cp.AdminConfig())
	nm = versioned.NewForConfigOrDie(cp.AdminConfig())
	// The node suite's overlay: steps that are harmless on a simulated node.
	if _, err := env.StartRegistered(ctx, stack.BashibleOptions{
		TemplatesDir: filepath.Join(env.Root, "hack", "e2e", "node", "testdata", "overlay"),
	}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	var err error
	if ctrl, err = env.StartController(ctx, stack.ControllerOptions{ExtraArgs: controllerArgs}); err != nil {
		return nil, fmt.Errorf("start node-manager-controller: %w", err)
	}
	kctx, stopKubelet := context.WithCancel(context.Background())
	go func() {
		for kctx.Err() == nil {
			kubelet(kctx)
		}
	}()
	return stopKubelet, nil
}

func testCtx(t *testing.T) context.Context { return stack.TestContext(t) }

// served is the group's checksum as bashible-apiserver serves it ("" before
// the group has a bundle).
func served(t *testing.T, group string) string {
	t.Helper()
	b, err := nm.BashibleV1alpha1().NodeGroupBundles().Get(testCtx(t), group, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
}

// newGroup creates a Static NodeGroup and waits for its bundle.
func newGroup(t *testing.T, name string, spec func(*deckhousev1.NodeGroupSpec)) *deckhousev1.NodeGroup {
	t.Helper()
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	if spec != nil {
		spec(&ng.Spec)
	}
	ng, err := nm.DeckhouseV1().NodeGroups().Create(testCtx(t), ng, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nm.DeckhouseV1().NodeGroups().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	stack.Poll(t, "bundle of group "+name, func(context.Context) (bool, error) { return served(t, name) != "", nil })
	return ng
}

// updateGroup changes a group's spec with retries on conflicts.
func updateGroup(t *testing.T, name string, mutate func(*deckhousev1.NodeGroupSpec)) {
	t.Helper()
	stack.Poll(t, "update of group "+name, func(ctx context.Context) (bool, error) {
		ng, err := nm.DeckhouseV1().NodeGroups().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mutate(&ng.Spec)
		_, err = nm.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

// newConfiguration gives the group a new configuration (a custom step) and
// returns the new checksum once it is served.
func newConfiguration(t *testing.T, group, content string) string {
	t.Helper()
	before := served(t, group)
	name := group + "-step"
	ngc, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(testCtx(t), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ngc = &deckhousev1alpha1.NodeGroupConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: deckhousev1alpha1.NodeGroupConfigurationSpec{Content: content, NodeGroups: []string{group}, Bundles: []string{"*"}}}
		if _, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Create(testCtx(t), ngc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = nm.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	case err != nil:
		t.Fatal(err)
	default:
		ngc.Spec.Content = content
		if _, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(testCtx(t), ngc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var sum string
	stack.Poll(t, "new checksum of group "+group, func(context.Context) (bool, error) {
		sum = served(t, group)
		return sum != before, nil
	})
	return sum
}

// waitRolledOut waits until every node of the group reports sum, carries no
// update annotation, is schedulable, and the group's status says so.
func waitRolledOut(t *testing.T, group, sum string, count int) {
	t.Helper()
	stack.Poll(t, fmt.Sprintf("rollout of %.12s over group %s", sum, group), func(ctx context.Context) (bool, error) {
		ng, err := nm.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if int(ng.Status.UpToDate) != count || int(ng.Status.Nodes) != count {
			return false, nil
		}
		list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=" + group})
		if err != nil {
			return false, err
		}
		for _, n := range list.Items {
			if n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != sum || n.Spec.Unschedulable {
				return false, nil
			}
			for k := range n.Annotations {
				if len(k) > len(deckhousev1.UpdateAnnotationPrefix) && k[:len(deckhousev1.UpdateAnnotationPrefix)] == deckhousev1.UpdateAnnotationPrefix {
					return false, nil
				}
			}
		}
		return true, nil
	})
}
