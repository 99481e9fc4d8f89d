// Package controllers is the e2e suite of node-manager-controller: the
// real binary (as its ServiceAccount, with the manifests' RBAC) against a
// local control plane and a registered bashible-apiserver, with nodes
// played by Go agents that follow bashible's protocol — and, in one test,
// by the real bashible.sh.
//
// The tests run in parallel (t.Parallel) against one controller: each has
// its own NodeGroups, nodes, pods and budgets, and asserts only on those
// (metrics and Events by their group's or node's name). The failover test,
// which kills the controller, stays serial: Go runs it before the rest.
package controllers

import (
	"context"
	"fmt"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f = framework.New(framework.Options{})
	// ctrl is the controller the tests run against; the failover test
	// (serial, so it runs before the parallel tests) replaces it with the
	// survivor.
	ctrl *stack.Controller
)

// controllerArgs make drains quick to observe.
var controllerArgs = []string{"--eviction-retry-interval=1s", "--default-drain-timeout=30s"}

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	// The bashible suite's overlay: steps that are harmless on a simulated node.
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
			f.Kubelet(kctx)
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
