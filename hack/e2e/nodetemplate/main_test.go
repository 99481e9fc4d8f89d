// Package nodetemplate is the e2e suite of the node-template controller:
// the controller runs in-process against a real kube-apiserver (with the
// real kube-controller-manager beside it), Node objects stand for the
// machines, and the tests change NodeGroup templates and watch the nodes.
package nodetemplate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nmscheme "github.com/node-manager/node-manager/generated/clientset/versioned/scheme"
	"github.com/node-manager/node-manager/hack/controlplane"
)

var (
	cp   *controlplane.ControlPlane
	kube kubernetes.Interface
	nm   versioned.Interface
	// registry holds the controller's metrics.
	registry *prometheus.Registry
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
	root, err := controlplane.RepoRoot()
	if err != nil {
		return fail("%v", err)
	}
	// The controller needs only the API and the CRDs; bashible-apiserver
	// plays no part in templates, so stack.NewEnvironment's build and
	// install are skipped.
	if cp, err = controlplane.Start(ctx, controlplane.Config{}); err != nil {
		return fail("start control plane: %v", err)
	}
	defer cp.StopOnSignal()()
	defer func() { _ = cp.Stop() }()
	applier, err := cp.NewApplier()
	if err != nil {
		return fail("%v", err)
	}
	if err := applier.ApplyFiles(ctx, filepath.Join(root, "manifests", "crds")); err != nil {
		return fail("install CRDs: %v", err)
	}
	cfg := cp.AdminConfig()
	kube = kubernetes.NewForConfigOrDie(cfg)
	nm = versioned.NewForConfigOrDie(cfg)

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
	defer broadcaster.Shutdown()
	d.Recorder = broadcaster.NewRecorder(scheme, deckhousev1.NodeManagerControllerName)

	c := nodetemplate.New(d)
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	done := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	go func() { defer close(done); c.Run(runCtx, 2) }()
	defer func() { stop(); <-done }()

	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs:\n%s", cp.LogTails(40))
	}
	return code
}
