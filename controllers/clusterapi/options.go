package clusterapi

import "github.com/spf13/pflag"

// Options turn the controller on and say what kubeconfig the Cluster's
// Secret holds.
type Options struct {
	// Enabled: Cluster API objects for static groups with
	// staticInstances. It needs Cluster API's CRDs and
	// capi-controller-manager, which not every installation runs, hence
	// off by default.
	Enabled bool
	// Kubeconfig is a kubeconfig file whose content the controller stores
	// in the Cluster's kubeconfig Secret (static-kubeconfig), for a
	// capi-controller-manager that runs outside the cluster (make run, the
	// e2e harness). Empty: a kubeconfig of the in-cluster API that
	// authenticates with the reading pod's own ServiceAccount token.
	Kubeconfig string
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "cluster-api", o.Enabled, "write the Cluster API objects of static groups with staticInstances (Cluster, MachineDeployments, StaticMachineTemplates) and link Instances to their Machines; needs Cluster API's CRDs and capi-controller-manager")
	fs.StringVar(&o.Kubeconfig, "cluster-api-kubeconfig", o.Kubeconfig, "kubeconfig file stored in the static-kubeconfig Secret for a capi-controller-manager running outside the cluster; empty means the in-cluster API with capi-controller-manager's own ServiceAccount token")
}
