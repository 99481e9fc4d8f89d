// Command node-manager-controller runs node-manager's controllers under one
// leader Lease: node-group status, node templates, update and disruption
// approval, draining, configuration checksums, bootstrap tokens and
// manual-bootstrap Secrets, Instances, and the approval of joining nodes'
// kubelet certificates. The list is controllers.All.
package main

import (
	"os"

	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/controllers"
	"github.com/node-manager/node-manager/controllers/manager"
)

func main() {
	opts := manager.NewOptions()
	if err := manager.Main(opts, opts.AddNodeManagerFlags, opts.ValidateNodeManager, controllers.All); err != nil {
		klog.ErrorS(err, "node-manager-controller failed")
		klog.Flush()
		os.Exit(1)
	}
}
