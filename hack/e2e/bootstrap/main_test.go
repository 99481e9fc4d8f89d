// Package bootstrap is the e2e suite of the bootstrap-token and
// manual-bootstrap controller: the controller runs in-process on a fake
// clock against the local control plane, with bashible-apiserver
// registered, and the manual-bootstrap script it writes is run the way an
// administrator runs it on a new machine.
package bootstrap

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	testclock "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/bootstrap"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nmscheme "github.com/node-manager/node-manager/generated/clientset/versioned/scheme"
	"github.com/node-manager/node-manager/hack/controlplane"
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
	cp    *controlplane.ControlPlane
	kube  kubernetes.Interface
	nm    versioned.Interface
	clock *testclock.FakeClock
)

func TestMain(m *testing.M) { os.Exit(stack.RunSuite(m, setUp)) }

func setUp(ctx context.Context, env *stack.Environment) (func(), error) {
	cp = env.CP
	cfg := cp.AdminConfig()
	kube = kubernetes.NewForConfigOrDie(cfg)
	nm = versioned.NewForConfigOrDie(cfg)
	if err := seedCluster(ctx); err != nil {
		return nil, fmt.Errorf("seed cluster: %w", err)
	}
	if _, err := env.StartRegistered(ctx, stack.BashibleOptions{Identity: "replica-1"}); err != nil {
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
	if err := stack.PublishAPIEndpoints(ctx, kube, "192.0.2.10"); err != nil {
		return err
	}
	for name, nodeType := range map[string]deckhousev1.NodeType{
		staticGroup:    deckhousev1.NodeTypeStatic,
		ephemeralGroup: deckhousev1.NodeTypeCloudEphemeral,
	} {
		ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: nodeType}}
		if nodeType == deckhousev1.NodeTypeCloudEphemeral {
			ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{
				ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "small"},
				MaxPerZone:     1,
			}
		}
		if _, err := nm.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// startController runs the controller as node-manager-controller would,
// but on a fake clock that starts at the real time (kube-apiserver judges
// the tokens by the real clock) and with events recorded to the API.
func startController() (func(), error) {
	clock = testclock.NewFakeClock(time.Now())
	d, err := manager.NewDeps(cp.AdminConfig(), manager.NewOptions(), clock, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := kubescheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := nmscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: d.Kube.EventsV1()})
	d.Recorder = broadcaster.NewRecorder(scheme, deckhousev1.NodeManagerControllerName)

	c := bootstrap.New(d)
	runCtx, cancel := context.WithCancel(context.Background())
	broadcaster.StartRecordingToSink(runCtx.Done())
	d.Informers.KubeSystem.Start(runCtx.Done())
	d.Informers.Tokens.Start(runCtx.Done())
	d.Informers.Namespace.Start(runCtx.Done())
	d.Informers.Default.Start(runCtx.Done())
	d.Informers.NodeManager.Start(runCtx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(runCtx, 2)
	}()
	return func() {
		cancel()
		<-done
		broadcaster.Shutdown()
	}, nil
}
