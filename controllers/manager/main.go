package manager

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

	"github.com/node-manager/node-manager/internal/kubeconfig"
	"github.com/node-manager/node-manager/internal/serving"
)

// NewFlagSet is the command line of a binary built on the manager, klog's
// flags aside: the manager's own options and the binary's (addFlags, may
// be nil).
func NewFlagSet(opts *Options, addFlags func(*pflag.FlagSet)) *pflag.FlagSet {
	fs := pflag.NewFlagSet(opts.Component, pflag.ExitOnError)
	opts.AddFlags(fs)
	if addFlags != nil {
		addFlags(fs)
	}
	return fs
}

// Main runs a binary built on the manager (node-manager-controller,
// caps-controller-manager) from its command line: the manager's flags, the
// binary's own (addFlags, may be nil) and klog's; then validate (may be nil)
// next to the manager's own checks, connect, serve /metrics and the probes,
// and run terms of leadership until SIGINT or SIGTERM. build makes each
// term's controllers. opts.Component names the flag set.
func Main(opts *Options, addFlags func(*pflag.FlagSet), validate func() error, build Build) error {
	fs := NewFlagSet(opts, addFlags)
	klogFlags := goflag.NewFlagSet("klog", goflag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	if validate != nil {
		if err := validate(); err != nil {
			return fmt.Errorf("invalid options: %w", err)
		}
	}
	cfg, err := kubeconfig.Load(opts.Kubeconfig)
	if err != nil {
		return err
	}
	reg := serving.NewRegistry()
	deps, err := NewDeps(cfg, opts, clock.RealClock{}, reg)
	if err != nil {
		return err
	}
	m := New(deps, opts, build)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	addr, err := serving.Serve(ctx, opts.ListenAddress, opts.Kubeconfig, &opts.Serving, m.Handler(reg))
	if err != nil {
		return err
	}
	klog.InfoS("Serving metrics (authenticated and authorized) and probes over HTTPS", "address", addr.String())
	return m.Run(ctx)
}
