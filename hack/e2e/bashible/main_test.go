// Package bashible is the e2e suite of bashible-apiserver: the real server
// binary, registered with the real kube-apiserver aggregator, exercised with
// kubectl and client-go as administrators, nodes and bootstrap tokens.
package bashible

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	cp       *controlplane.ControlPlane
	replica  *stack.Bashible
	kube     kubernetes.Interface
	nm       versioned.Interface
	repoRoot string
)

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		if cp != nil {
			fmt.Fprintf(os.Stderr, "logs:\n%s", cp.LogTails(40))
		}
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err := stack.NewEnvironment(ctx)
	if err != nil {
		return fail("set up: %v", err)
	}
	cp, repoRoot = env.CP, env.Root
	defer cp.StopOnSignal()()
	defer func() { _ = cp.Stop() }()
	cfg := cp.AdminConfig()
	kube = kubernetes.NewForConfigOrDie(cfg)
	nm = versioned.NewForConfigOrDie(cfg)
	if err := seedCluster(ctx); err != nil {
		return fail("seed cluster: %v", err)
	}
	if replica, err = env.StartRegistered(ctx, stack.BashibleOptions{Identity: "replica-1"}); err != nil {
		return fail("start bashible-apiserver: %v", err)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs:\n%s", cp.LogTails(60))
	}
	return code
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
