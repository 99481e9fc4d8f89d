// Command fencing-agent runs on every node of a fenced NodeGroup (a
// DaemonSet per group): it arms the node's watchdog and feeds it while the
// node is healthy — while the API answers or it sees a majority of its
// group over gossip — so that a node cut off from both is reset before the
// fencing controller frees its pods. The loop is agents/fencing-agent/agent.
package main

import (
	"context"
	goflag "flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/node-manager/node-manager/agents/fencing-agent/agent"
	"github.com/node-manager/node-manager/agents/fencing-agent/membership"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/internal/serving"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "fencing-agent failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run() error {
	opts := agent.NewOptions()
	fs := pflag.NewFlagSet(deckhousev1.FencingAgentName, pflag.ExitOnError)
	opts.AddFlags(fs)
	klogFlags := goflag.NewFlagSet("klog", goflag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	cfg, err := opts.RESTConfig()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	// The gossip starts listening at the first join, once the group's
	// keyring is read; until then the agent is not ready and does not arm.
	gossip := membership.New(membership.Config{
		Name: opts.NodeName, Group: opts.Group,
		BindAddr: opts.GossipBindAddress, Port: opts.GossipPort, AdvertiseAddr: opts.AdvertiseAddress,
		ProbeInterval: opts.ProbeInterval, KeyDir: opts.GossipKeyDir,
	})
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	recorder := broadcaster.NewRecorder(scheme.Scheme, deckhousev1.FencingAgentName)
	a := agent.New(opts.Config, kube, agent.NewDevice(opts.Mode, opts.DevicePath), gossip, recorder, clock.RealClock{})

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(a.Collectors()...)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Events outlive ctx, so the disarm on SIGTERM is still sent.
	eventsStop := make(chan struct{})
	broadcaster.StartRecordingToSink(eventsStop)
	defer func() {
		close(eventsStop)
		broadcaster.Shutdown()
	}()
	addr, err := serving.Serve(ctx, opts.ListenAddress, opts.Kubeconfig, &opts.Serving, a.Handler(reg))
	if err != nil {
		return err
	}
	klog.InfoS("Fencing agent started", "node", opts.NodeName, "group", opts.Group, "mode", opts.Mode,
		"device", opts.DevicePath, "apiServer", cfg.Host, "feedInterval", opts.FeedInterval, "apiTimeout", opts.APITimeout,
		"gossip", gossip.Address(), "serving", addr.String())
	return a.Run(ctx)
}
