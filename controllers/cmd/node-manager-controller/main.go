// Command node-manager-controller runs node-manager's controllers under one
// leader Lease: node-group status, node templates, update and disruption
// approval, draining, configuration checksums, bootstrap tokens and
// manual-bootstrap Secrets, Instances, and the approval of joining nodes'
// kubelet certificates. The list is controllers.All.
package main

import (
	"context"
	goflag "flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/serving"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "node-manager-controller failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	opts := manager.NewOptions()
	fs := pflag.NewFlagSet(deckhousev1.NodeManagerControllerName, pflag.ExitOnError)
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
	cfg, err := manager.LoadConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	reg := manager.NewRegistry()
	deps, err := manager.NewDeps(cfg, opts, clock.RealClock{}, reg)
	if err != nil {
		return err
	}
	m := manager.New(deps, opts, controllers.All)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	addr, err := serving.Serve(ctx, opts.ListenAddress, opts.Kubeconfig, &opts.Serving, m.Handler(reg))
	if err != nil {
		return err
	}
	klog.InfoS("Serving metrics (authenticated and authorized) and probes over HTTPS", "address", addr.String())
	return m.Run(ctx)
}
