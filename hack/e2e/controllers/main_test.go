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
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f = framework.New(framework.Options{})
	// ctrl is the controller the tests run against; the failover test
	// replaces it with the survivor.
	ctrl *stack.Controller
)

// controllerArgs make drains quick to observe.
var controllerArgs = []string{"--eviction-retry-interval=1s", "--default-drain-timeout=30s"}

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	// The agent suite's overlay: steps that are harmless on a simulated node.
	if _, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{TemplatesDir: f.OverlayDir()}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	var err error
	if ctrl, err = f.Env.StartController(ctx, stack.ControllerOptions{ExtraArgs: controllerArgs}); err != nil {
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

// newGroup creates a Static NodeGroup for the test and waits for its bundle.
func newGroup(t *testing.T, name string, spec func(*deckhousev1.NodeGroupSpec)) *deckhousev1.NodeGroup {
	t.Helper()
	ng := f.TestGroup(t, framework.NewGroup(name, func(ng *deckhousev1.NodeGroup) {
		if spec != nil {
			spec(&ng.Spec)
		}
	}))
	f.WaitChecksum(t, name, func(sum string) bool { return sum != "" })
	return ng
}

// updateGroup changes a group's spec with retries on conflicts.
func updateGroup(t *testing.T, name string, mutate func(*deckhousev1.NodeGroupSpec)) {
	t.Helper()
	framework.Poll(t, "update of group "+name, func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mutate(&ng.Spec)
		_, err = f.NM.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

// newConfiguration gives the group a new configuration (a custom step) and
// returns the new checksum once it is served.
func newConfiguration(t *testing.T, group, content string) string {
	t.Helper()
	before := f.Checksum(t, group)
	name := group + "-step"
	ngc, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(framework.Context(t), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		f.TestConfiguration(t, name, deckhousev1alpha1.NodeGroupConfigurationSpec{Content: content, NodeGroups: []string{group}, Bundles: []string{"*"}})
	case err != nil:
		t.Fatal(err)
	default:
		ngc.Spec.Content = content
		if _, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Update(framework.Context(t), ngc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return f.WaitChecksum(t, group, func(sum string) bool { return sum != before })
}

// waitRolledOut waits until every node of the group reports sum, carries no
// update annotation, is schedulable, and the group's status says so.
func waitRolledOut(t *testing.T, group, sum string, count int) {
	t.Helper()
	framework.Poll(t, fmt.Sprintf("rollout of %.12s over group %s", sum, group), func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if int(ng.Status.UpToDate) != count || int(ng.Status.Nodes) != count {
			return false, nil
		}
		list, err := f.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=" + group})
		if err != nil {
			return false, err
		}
		for _, n := range list.Items {
			if n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != sum || n.Spec.Unschedulable {
				return false, nil
			}
			for k := range n.Annotations {
				if len(k) > len(deckhousev1.UpdateAnnotationPrefix) && strings.HasPrefix(k, deckhousev1.UpdateAnnotationPrefix) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}
