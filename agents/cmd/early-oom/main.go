// Command early-oom is the memory-pressure agent, a DaemonSet on every
// node: it watches the node's memory Pressure Stall Information and
// MemAvailable and, when pressure lasts, deletes the pod the kubelet's
// memory eviction would choose, before the kernel's OOM killer or the
// kubelet act. See agents/early-oom/agent.
package main

import (
	"context"
	goflag "flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/agents/early-oom/agent"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/internal/kubeconfig"
	"github.com/node-manager/node-manager/internal/serving"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "early-oom failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	opts := agent.NewOptions()
	fs := pflag.NewFlagSet(deckhousev1.EarlyOOMName, pflag.ExitOnError)
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
	cfg, err := kubeconfig.Load(opts.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = deckhousev1.EarlyOOMName
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	reg := serving.NewRegistry()
	a, err := agent.New(opts, client, reg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	addr, err := serving.Serve(ctx, opts.ListenAddress, opts.Kubeconfig, &opts.Serving, a.Handler(reg))
	if err != nil {
		return err
	}
	klog.InfoS("Serving metrics (authenticated and authorized) and probes over HTTPS", "address", addr.String())
	return a.Run(ctx)
}
