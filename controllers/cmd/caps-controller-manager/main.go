// Command caps-controller-manager is Cluster API Provider Static: the
// infrastructure provider that backs Cluster API's StaticMachines with
// StaticInstances, joining them over SSH and cleaning them when their
// Machines go (controllers/caps/staticmachines).
//
// It is a binary of its own, not a part of node-manager-controller, so that
// the SSH keys and passwords of SSHCredentials are readable by its
// ServiceAccount alone (manifests/caps-controller-manager/rbac.yaml), and
// node-manager-controller, which holds the bootstrap tokens, never holds a
// key to a host. It shares node-manager-controller's manager: options,
// leader election under its own Lease, delegated-auth /metrics and probes.
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
	"github.com/node-manager/node-manager/controllers/caps/staticmachines"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/serving"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "caps-controller-manager failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	opts := manager.NewOptions()
	opts.Component = deckhousev1.CAPSControllerManagerName
	opts.ListenAddress = ":9682"
	caps := staticmachines.NewOptions()
	fs := pflag.NewFlagSet(deckhousev1.CAPSControllerManagerName, pflag.ExitOnError)
	opts.AddFlags(fs)
	fs.DurationVar(&caps.BootstrapTimeout, "bootstrap-timeout", caps.BootstrapTimeout, "a StaticInstance Bootstrapping for longer without its Node joining is cleaned and released (Event StaticInstanceBootstrapTimeoutReached)")
	fs.DurationVar(&caps.CleanupTimeout, "cleanup-timeout", caps.CleanupTimeout, "a StaticInstance Cleaning for longer is released anyway (Event StaticInstanceCleanupTimeoutReached)")
	klogFlags := goflag.NewFlagSet("klog", goflag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	if caps.BootstrapTimeout <= 0 || caps.CleanupTimeout <= 0 {
		return fmt.Errorf("invalid options: --bootstrap-timeout and --cleanup-timeout must be positive")
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
	// Each term of leadership builds the controller afresh from the term's
	// Deps (see manager.Build), so nothing of a lost term is carried over.
	m := manager.New(deps, opts, func(d *manager.Deps) []manager.Controller {
		return []manager.Controller{staticmachines.New(d, caps)}
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	addr, err := serving.Serve(ctx, opts.ListenAddress, opts.Kubeconfig, &opts.Serving, m.Handler(reg))
	if err != nil {
		return err
	}
	klog.InfoS("Serving metrics (authenticated and authorized) and probes over HTTPS", "address", addr.String())
	return m.Run(ctx)
}
