// Command node-manager-controller runs node-manager's controllers under one
// leader Lease: node-group status, node templates, update and disruption
// approval, draining, configuration checksums, bootstrap tokens and
// manual-bootstrap Secrets, Instances, and the approval of joining nodes'
// kubelet certificates. The list is controllers.All.
package main

import (
	"os"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/controllers"
	"github.com/node-manager/node-manager/controllers/manager"
)

func main() {
	if err := manager.Main(command()); err != nil {
		klog.ErrorS(err, "node-manager-controller failed")
		klog.Flush()
		os.Exit(1)
	}
}

// command is the binary's options, its flags beside the manager's, their
// check and its controllers.
func command() (*manager.Options, func(*pflag.FlagSet), func() error, manager.Build) {
	opts, ctl := manager.NewOptions(), controllers.NewOptions()
	return opts, ctl.AddFlags, ctl.Validate, func(d *manager.Deps) []manager.Controller { return controllers.All(d, ctl) }
}
