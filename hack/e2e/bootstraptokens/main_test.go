// Package bootstraptokens is the e2e suite of the bootstrap-token and
// manual-bootstrap controller: the controller runs in-process on a fake
// clock against the local control plane, with bashible-apiserver
// registered, and the manual-bootstrap script it writes is run the way an
// administrator runs it on a new machine.
package bootstraptokens

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	testclock "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/bootstraptokens"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// The groups of the suite: one joined by hand, one ordered from a cloud.
const (
	staticGroup    = "worker"
	ephemeralGroup = "cloud"
	// documentedEndpoint stands in for the API servers' address in the
	// EndpointSlice: loopback addresses cannot be stored there, so the
	// script's runs point BASHIBLE_API_ENDPOINTS at the local server.
	documentedEndpoint = "192.0.2.10:6443"
)

var (
	f     = framework.New(framework.Options{})
	clock *testclock.FakeClock
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	if err := seedCluster(ctx); err != nil {
		return nil, fmt.Errorf("seed cluster: %w", err)
	}
	if _, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{Identity: "replica-1"}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	stop, err := startController()
	if err != nil {
		return nil, fmt.Errorf("start the bootstrap controller: %w", err)
	}
	return stop, nil
}

// seedCluster writes the API endpoints (the local kube-apiserver runs
// without an endpoint reconciler) and the suite's groups. The CA
// (kube-system/kube-root-ca.crt) is published by kube-controller-manager.
func seedCluster(ctx context.Context) error {
	if err := stack.PublishAPIEndpoints(ctx, f.Kube, "192.0.2.10"); err != nil {
		return err
	}
	for _, ng := range []*deckhousev1.NodeGroup{
		framework.NewGroup(staticGroup),
		framework.NewGroup(ephemeralGroup, framework.OfType(deckhousev1.NodeTypeCloudEphemeral)),
	} {
		if _, err := f.CreateGroup(ctx, ng); err != nil {
			return fmt.Errorf("create NodeGroup %s: %w", ng.Name, err)
		}
	}
	return nil
}

// startController runs the controller as node-manager-controller would,
// without the Lease, on a fake clock that starts at the real time
// (kube-apiserver judges the tokens by the real clock); the manager
// records its events to the API.
func startController() (func(), error) {
	clock = testclock.NewFakeClock(time.Now())
	opts := manager.NewOptions()
	opts.LeaderElect = false
	d, err := manager.NewDeps(f.CP.AdminConfig(), opts, clock, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	mgr := manager.New(d, opts, func(d *manager.Deps) []manager.Controller { return []manager.Controller{bootstraptokens.New(d)} })
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Run(runCtx)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}
