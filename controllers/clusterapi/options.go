package clusterapi

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Options turn the controller on and say what kubeconfig the Cluster's
// Secret holds, and, for CloudEphemeral groups, what the cloud provider's
// installation made.
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

	// CloudCluster is the Cluster API Cluster of the cloud provider's
	// installation, in node-manager's namespace; empty: CloudEphemeral
	// groups get no machines.
	CloudCluster string
	// CloudMachineTemplate is the provider's InfrastructureMachineTemplate
	// resource, as resource.version.group (awsmachinetemplates.v1beta2.infrastructure.cluster.x-k8s.io).
	CloudMachineTemplate string
	// CloudZones are the provider's zones, for groups that name none.
	CloudZones []string
	// ClusterUUID names this cluster's machines apart from other clusters'
	// in one cloud account; empty: the UID of the Cluster CloudCluster.
	ClusterUUID string
	// MachineLostAfter is how long a CloudEphemeral machine's node may be
	// lost (Ready Unknown) before Cluster API replaces the machine;
	// MachineStartupTimeout how long a new machine may take to become a
	// node.
	MachineLostAfter      time.Duration
	MachineStartupTimeout time.Duration
}

// NewOptions are the defaults: Cluster API off; a lost CloudEphemeral
// machine replaced after 10 minutes, one that does not join after 20.
func NewOptions() Options {
	return Options{MachineLostAfter: 10 * time.Minute, MachineStartupTimeout: 20 * time.Minute}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "cluster-api", o.Enabled, "write the Cluster API objects of static groups with staticInstances (Cluster, MachineDeployments, StaticMachineTemplates) and link Instances to their Machines; needs Cluster API's CRDs and capi-controller-manager")
	fs.StringVar(&o.Kubeconfig, "cluster-api-kubeconfig", o.Kubeconfig, "kubeconfig file stored in the static-kubeconfig Secret for a capi-controller-manager running outside the cluster; empty means the in-cluster API with capi-controller-manager's own ServiceAccount token")
	fs.StringVar(&o.CloudCluster, "cloud-cluster", o.CloudCluster, "with --cluster-api: the Cluster API Cluster of the cloud provider's installation (in node-manager's namespace) that CloudEphemeral groups' machines belong to; empty means CloudEphemeral groups get no machines")
	fs.StringVar(&o.CloudMachineTemplate, "cloud-machine-template", o.CloudMachineTemplate, "with --cloud-cluster: the provider's InfrastructureMachineTemplate resource as resource.version.group (for example awsmachinetemplates.v1beta2.infrastructure.cluster.x-k8s.io); a CloudEphemeral group's cloudInstances.classReference names one of them")
	fs.StringSliceVar(&o.CloudZones, "cloud-zones", o.CloudZones, "with --cloud-cluster: the provider's zones (failure domains), for CloudEphemeral groups whose cloudInstances.zones is empty")
	fs.DurationVar(&o.MachineLostAfter, "cloud-machine-lost-after", o.MachineLostAfter, "with --cloud-cluster: how long a CloudEphemeral machine's node may be lost (Ready Unknown) before Cluster API replaces the machine (the group's MachineHealthCheck)")
	fs.DurationVar(&o.MachineStartupTimeout, "cloud-machine-startup-timeout", o.MachineStartupTimeout, "with --cloud-cluster: how long a new CloudEphemeral machine may take to become a node before Cluster API replaces it")
	fs.StringVar(&o.ClusterUUID, "cluster-uuid", o.ClusterUUID, "with --cloud-cluster: what makes the names of this cluster's machines unique in the cloud account (Deckhouse's d8-cluster-uuid, to keep a Deckhouse cluster's names); empty means the UID of the --cloud-cluster Cluster")
}

// Validate checks the cloud settings.
func (o *Options) Validate() error {
	if o.CloudCluster == "" {
		if o.CloudMachineTemplate != "" || len(o.CloudZones) > 0 {
			return errors.New("--cloud-machine-template and --cloud-zones need --cloud-cluster, the Cluster API Cluster CloudEphemeral machines belong to")
		}
		return nil
	}
	if !o.Enabled {
		return errors.New("--cloud-cluster needs --cluster-api")
	}
	if _, err := o.templateResource(); err != nil {
		return err
	}
	if o.MachineLostAfter < time.Second || o.MachineStartupTimeout < time.Second {
		return fmt.Errorf("--cloud-machine-lost-after (%s) and --cloud-machine-startup-timeout (%s) must be at least 1s", o.MachineLostAfter, o.MachineStartupTimeout)
	}
	return nil
}

// templateResource is CloudMachineTemplate parsed.
func (o *Options) templateResource() (schema.GroupVersionResource, error) {
	gvr, _ := schema.ParseResourceArg(o.CloudMachineTemplate)
	if gvr == nil || gvr.Group == "" || gvr.Version == "" || gvr.Resource == "" {
		return schema.GroupVersionResource{}, fmt.Errorf("--cloud-machine-template=%q: want the provider's machine template resource as resource.version.group, for example awsmachinetemplates.v1beta2.infrastructure.cluster.x-k8s.io", o.CloudMachineTemplate)
	}
	return *gvr, nil
}
