// Command bashible-apiserver serves bashible.deckhouse.io/v1alpha1 (bashibles,
// nodegroupbundles, bootstrap) as an aggregated API: node bundles rendered
// from the built-in template tree and users' NodeGroupConfigurations.
package main

import (
	goflag "flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/server"
	"github.com/node-manager/node-manager/templates/sandbox"
)

func main() {
	// Before anything else: this binary is also the worker that renders
	// NodeGroupConfigurations in a process of their own.
	sandbox.RunWorkerIfRequested()
	if err := run(); err != nil {
		klog.ErrorS(err, "bashible-apiserver failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	opts := server.NewOptions()
	fs := pflag.NewFlagSet(deckhousev1.BashibleAPIServerName, pflag.ExitOnError)
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
	cfg, err := opts.Config()
	if err != nil {
		return err
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		return err
	}
	return srv.Run(genericapiserver.SetupSignalContext())
}
