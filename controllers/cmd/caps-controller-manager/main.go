// Command caps-controller-manager is Cluster API Provider Static: the
// infrastructure provider that backs Cluster API's StaticMachines with
// StaticInstances, joining them over SSH and cleaning them when their
// Machines go (controllers/caps/staticmachines); on a cluster that ran
// Deckhouse it also migrates the stored SSHCredentials and StaticInstances
// to their storage version (controllers/crdmigration).
//
// It is a binary of its own, not a part of node-manager-controller, so that
// the SSH keys and passwords of SSHCredentials are readable by its
// ServiceAccount alone (manifests/caps-controller-manager/rbac.yaml), and
// node-manager-controller, which holds the bootstrap tokens, never holds a
// key to a host. It shares node-manager-controller's manager: options,
// leader election under its own Lease, delegated-auth /metrics and probes.
package main

import (
	"os"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/caps/staticmachines"
	"github.com/node-manager/node-manager/controllers/crdmigration"
	"github.com/node-manager/node-manager/controllers/manager"
)

func main() {
	if err := manager.Main(command()); err != nil {
		klog.ErrorS(err, "caps-controller-manager failed")
		klog.Flush()
		os.Exit(1)
	}
}

// command is the binary's options, its flags beside the manager's, their
// check and its controllers.
func command() (*manager.Options, func(*pflag.FlagSet), func() error, manager.Build) {
	opts := manager.NewOptions()
	opts.Component = deckhousev1.CAPSControllerManagerName
	opts.ListenAddress = ":9682"
	caps := staticmachines.NewOptions()
	// Each term of leadership builds the controller afresh from the term's
	// Deps (see manager.Build), so nothing of a lost term is carried over.
	build := func(d *manager.Deps) []manager.Controller {
		return []manager.Controller{
			staticmachines.New(d, caps),
			// The storage migration of its own kinds (SSHCredentials,
			// StaticInstances) on a cluster that ran Deckhouse: only
			// this identity may read SSHCredentials.
			crdmigration.New(d, crdmigration.CAPSControllerManagerResources),
		}
	}
	// Validate after parsing: caps.Validate would copy the defaults now.
	return opts, caps.AddFlags, func() error { return caps.Validate() }, build
}
