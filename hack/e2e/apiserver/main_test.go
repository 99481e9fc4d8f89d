// Package apiserver is the e2e suite of bashible-apiserver: the real server
// binary, registered with the real kube-apiserver aggregator, exercised with
// kubectl and client-go as administrators, nodes and bootstrap tokens.
package apiserver

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f       = framework.New(framework.Options{})
	replica *stack.APIServer
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	if err := seedCluster(ctx); err != nil {
		return nil, fmt.Errorf("seed cluster: %w", err)
	}
	var err error
	if replica, err = f.Env.StartRegistered(ctx, stack.APIServerOptions{Identity: "replica-1"}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	return nil, nil
}

// seedCluster writes what a real cluster would have: API endpoints (the
// local kube-apiserver's loopback address cannot be stored, so a
// documentation address stands in), a cluster configuration, and two groups.
func seedCluster(ctx context.Context) error {
	if err := stack.PublishAPIEndpoints(ctx, f.Kube, "192.0.2.10", "192.0.2.11"); err != nil {
		return err
	}
	for _, ng := range []string{"master", "worker"} {
		if _, err := f.CreateGroup(ctx, framework.NewGroup(ng)); err != nil {
			return fmt.Errorf("create NodeGroup %s: %w", ng, err)
		}
	}
	return nil
}
