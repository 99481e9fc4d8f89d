// Package apiserver is the e2e suite of bashible-apiserver: the real server
// binary, registered with the real kube-apiserver aggregator, exercised with
// kubectl and client-go as administrators, nodes and bootstrap tokens.
package apiserver

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	cp       *controlplane.ControlPlane
	replica  *stack.APIServer
	kube     kubernetes.Interface
	nm       versioned.Interface
	repoRoot string
)

func TestMain(m *testing.M) { os.Exit(stack.RunSuite(m, setUp)) }

func setUp(ctx context.Context, env *stack.Environment) (func(), error) {
	cp, repoRoot = env.CP, env.Root
	cfg := cp.AdminConfig()
	kube = kubernetes.NewForConfigOrDie(cfg)
	nm = versioned.NewForConfigOrDie(cfg)
	if err := seedCluster(ctx); err != nil {
		return nil, fmt.Errorf("seed cluster: %w", err)
	}
	var err error
	if replica, err = env.StartRegistered(ctx, stack.APIServerOptions{Identity: "replica-1"}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	return nil, nil
}

// seedCluster writes what a real cluster would have: API endpoints (the
// local kube-apiserver's loopback address cannot be stored, so a
// documentation address stands in), a cluster configuration, and two groups.
func seedCluster(ctx context.Context) error {
	if err := stack.PublishAPIEndpoints(ctx, kube, "192.0.2.10", "192.0.2.11"); err != nil {
		return err
	}
	for _, ng := range []string{"master", "worker"} {
		if err := createGroup(ctx, ng, nil); err != nil {
			return err
		}
	}
	return nil
}
