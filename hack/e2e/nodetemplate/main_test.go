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
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
	nmscheme "github.com/node-manager/node-manager/generated/clientset/versioned/scheme"
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
// returned func is called, with its events recorded to the API.
func startController(ctx context.Context) (func(), error) {
	cfg := f.CP.AdminConfig()
	fail := func(format string, args ...any) (func(), error) { return nil, fmt.Errorf(format, args...) }
	registry = prometheus.NewRegistry()
	d, err := manager.NewDeps(cfg, manager.NewOptions(), clock.RealClock{}, registry)
	if err != nil {
		return fail("controller dependencies: %v", err)
	}
	// The manager starts its event broadcaster only under the Lease; here
	// the events go to the API directly so the tests can read them.
	scheme := runtime.NewScheme()
	_ = kubescheme.AddToScheme(scheme)
	_ = nmscheme.AddToScheme(scheme)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: d.Kube.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	d.Recorder = broadcaster.NewRecorder(scheme, manager.Name)

	c := nodetemplate.New(d)
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	done := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	go func() { defer close(done); c.Run(runCtx, 2) }()
	return func() { stop(); <-done; broadcaster.Shutdown() }, nil
}
