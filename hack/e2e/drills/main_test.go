// Package drills is the e2e suite of fault drills: what the cluster sees
// while node-manager's processes and the control plane under them fail.
// One control plane serves every drill: two bashible-apiserver replicas
// behind a framework.Service (the Service and its readiness probe, which
// the aggregator reaches), each reaching kube-apiserver through a link the
// drill can cut, two node-manager-controllers (a leader and a standby),
// and nodes played by framework.Agents. Each drill injects one fault and
// asserts what clients see — the APIService's Available condition sampled
// every second, a namespace created and deleted during the fault, the
// errors of 64 concurrent GETs, the approval invariants of a rollout, the
// published Secrets' write history — and logs its figures as a line
// starting "DRILL", from which the reliability table in docs/operations/fault-drills.md is made.
package drills

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f = framework.New(framework.Options{})
	// replicas are the two bashible-apiserver replicas; a drill that
	// restarts one puts the new process in its place.
	replicas [2]*stack.APIServer
	// links are the replicas' connections to kube-apiserver, in the same
	// order.
	links [2]*framework.TCPProxy
	// service is what the APIService points at.
	service *framework.Service
	// controllers are the running node-manager-controllers; a drill that
	// kills the leader starts a new standby.
	controllers []*stack.Controller
	// controllerLinks are the controllers' connections to kube-apiserver,
	// by identity.
	controllerLinks = map[string]*framework.TCPProxy{}
)

// leaseArgs are the Lease timings of every process in the suite: a short
// Lease, so that a lost Lease is taken over within seconds (the deployed
// ones are 15 s, 10 s and 2 s). A renew deadline missed under load costs
// a term, not a process, so it can be this short.
var leaseArgs = []string{
	"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=" + controllerRenewDeadline.String(), "--leader-elect-retry-period=250ms",
}

// controllerRenewDeadline is the renew deadline of leaseArgs.
const controllerRenewDeadline = 2 * time.Second

// replicaArgs: the suite's Lease, and a shutdown delay above the
// Service's probe period, so that a replica told to stop is out of the
// Service before it closes its port.
var replicaArgs = append([]string{"--shutdown-delay-duration=" + (2 * probePeriod).String()}, leaseArgs...)

// controllerArgs: the suite's Lease, and drains quick to observe.
var controllerArgs = append([]string{"--eviction-retry-interval=1s", "--default-drain-timeout=60s"}, leaseArgs...)

// probePeriod is how often the Service probes the replicas' /readyz.
const probePeriod = time.Second

// groups seeded for the drills that only read.
const readGroup = "drill-read"

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	if _, err := f.CreateGroup(ctx, framework.NewGroup(readGroup)); err != nil {
		return nil, fmt.Errorf("create NodeGroup %s: %w", readGroup, err)
	}
	kubeAPI := strings.TrimPrefix(f.CP.APIServerURL, "https://")
	var backends []string
	for i := range replicas {
		link, err := framework.StartTCPProxy(kubeAPI)
		if err != nil {
			return nil, err
		}
		links[i] = link
		r, err := stack.StartAPIServer(ctx, f.CP, replicaOptions(i, f.OverlayDir()))
		if err != nil {
			return nil, fmt.Errorf("start bashible-apiserver: %w", err)
		}
		replicas[i] = r
		backends = append(backends, "127.0.0.1:"+strconv.Itoa(r.Port))
	}
	var err error
	if service, err = framework.StartService(probePeriod, backends...); err != nil {
		return nil, err
	}
	if err := stack.RegisterAt(ctx, f.CP, service.Port()); err != nil {
		return nil, err
	}
	for _, id := range []string{"controller-1", "controller-2"} {
		c, err := startController(ctx, id)
		if err != nil {
			return nil, err
		}
		controllers = append(controllers, c)
	}
	kctx, stopKubelet := context.WithCancel(context.Background())
	go func() {
		for kctx.Err() == nil {
			f.Kubelet(kctx)
		}
	}()
	return func() {
		stopKubelet()
		service.Close()
		for _, l := range links {
			l.Close()
		}
		for _, l := range controllerLinks {
			l.Close()
		}
	}, nil
}

// startController starts a node-manager-controller that reaches
// kube-apiserver through a link of its own, which a drill can cut.
func startController(ctx context.Context, identity string) (*stack.Controller, error) {
	link, err := framework.StartTCPProxy(strings.TrimPrefix(f.CP.APIServerURL, "https://"))
	if err != nil {
		return nil, err
	}
	controllerLinks[identity] = link
	c, err := f.Env.StartController(ctx, stack.ControllerOptions{Identity: identity, ExtraArgs: controllerArgs, APIServer: link.Addr()})
	if err != nil {
		return nil, fmt.Errorf("start node-manager-controller %s: %w", identity, err)
	}
	return c, nil
}

// replicaOptions are replica i's: its identity, templates and link.
func replicaOptions(i int, templates string) stack.APIServerOptions {
	return stack.APIServerOptions{Identity: "replica-" + string(rune('a'+i)), TemplatesDir: templates,
		APIServer: links[i].Addr(), ExtraArgs: replicaArgs}
}
