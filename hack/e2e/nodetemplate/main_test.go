// Package nodetemplate is the e2e suite of the node-template controller:
// the controller runs in-process against a real kube-apiserver (with the
// real kube-controller-manager beside it), Node objects stand for the
// machines, and the tests change NodeGroup templates and watch the nodes.
package nodetemplate

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

var (
	// The controller needs only the API and the CRDs; bashible-apiserver
	// plays no part in templates, so the suite is bare.
	f = framework.New(framework.Options{Bare: true})
	// registry holds the controller's metrics.
	registry *prometheus.Registry
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, startController)) }

// startController runs the node-template controller in-process until the
// returned func is called. The manager runs it without the Lease, with its
// own informers and event recorder, so the tests can read the events.
func startController(ctx context.Context) (func(), error) {
	registry = prometheus.NewRegistry()
	opts := manager.NewOptions()
	opts.LeaderElect = false
	d, err := manager.NewDeps(f.CP.AdminConfig(), opts, clock.RealClock{}, registry)
	if err != nil {
		return nil, fmt.Errorf("controller dependencies: %w", err)
	}
	mgr := manager.New(d, opts, func(d *manager.Deps) []manager.Controller { return []manager.Controller{nodetemplate.New(d)} })
	done := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	go func() { defer close(done); _ = mgr.Run(runCtx) }()
	return func() { stop(); <-done }, nil
}
