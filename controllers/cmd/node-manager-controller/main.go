// Command node-manager-controller runs node-manager's controllers under one
// leader Lease: node-group status, node templates, update and disruption
// approval, draining, configuration checksums, bootstrap tokens and
// manual-bootstrap Secrets, Instances, and the approval of joining nodes'
// kubelet certificates.
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
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/controllers/bootstrap"
	"github.com/node-manager/node-manager/controllers/checksums"
	"github.com/node-manager/node-manager/controllers/csrapproval"
	"github.com/node-manager/node-manager/controllers/drain"
	"github.com/node-manager/node-manager/controllers/instances"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
	"github.com/node-manager/node-manager/controllers/status"
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
	m := manager.New(deps, opts, all(deps)...)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	addr, err := manager.Serve(ctx, opts.ListenAddress, m.Handler(reg))
	if err != nil {
		return err
	}
	klog.InfoS("Serving metrics and probes", "address", addr.String())
	return m.Run(ctx)
}

// all builds every controller the binary runs.
func all(deps *manager.Deps) []manager.Controller {
	return []manager.Controller{
		status.New(deps),
		approval.New(deps),
		drain.New(deps),
		checksums.New(deps),
		instances.New(deps),
		csrapproval.New(deps),
		nodetemplate.New(deps),
		bootstrap.New(deps),
	}
}
