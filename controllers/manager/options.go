package manager

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/serving"
)

// Options are the command-line settings.
type Options struct {
	Kubeconfig    string
	Namespace     string
	Identity      string
	ListenAddress string
	Workers       int
	// Serving: HTTPS and delegated authentication and authorization of
	// /metrics (see serving.Options).
	Serving serving.Options

	// LeaderElect runs the controllers only while this process holds the
	// Lease (the default, so that two replicas never act at once). Without
	// it the controllers run as soon as the informers have synced: for a
	// single process that is sure to be alone, such as a test suite.
	LeaderElect   bool
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// EvictionRetry is how long a drain waits before evicting a pod again
	// after a PodDisruptionBudget refused it.
	EvictionRetry time.Duration
	// DrainTimeout applies to groups without nodeDrainTimeoutSecond.
	DrainTimeout time.Duration
	// FencingAgentImage is the image of the fencing agents' DaemonSets
	// (controllers/fencingagents).
	FencingAgentImage string
	// NodeName is the node this process runs on (the Deployment passes
	// spec.nodeName): while it is its group's only Ready node, it is not
	// drained for an update, as Deckhouse spares its own node.
	NodeName string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	host, _ := os.Hostname()
	return &Options{
		Namespace:     deckhousev1.Namespace,
		Identity:      host,
		ListenAddress: ":9680",
		Workers:       2,
		LeaderElect:   true,
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
		EvictionRetry: 20 * time.Second,
		DrainTimeout:  10 * time.Minute,
		// The image's name as the manifests' kustomization names it (a
		// kustomize images transformer, or the flag, sets the real one).
		FencingAgentImage: deckhousev1.FencingAgentName,
		Serving:           serving.NewOptions(),
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty means in-cluster configuration")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of node-manager's Secrets and Lease")
	fs.StringVar(&o.Identity, "identity", o.Identity, "leader election identity (defaults to the host name)")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "address of /metrics (HTTPS; callers authenticated and authorized by the Kubernetes API), /healthz and /readyz (open)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "workers per controller")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run the controllers only while holding the Lease; false runs them at once, for a process that is sure to be alone")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "leader Lease duration")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader keeps trying to renew")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often candidates try to take the Lease")
	fs.DurationVar(&o.EvictionRetry, "eviction-retry-interval", o.EvictionRetry, "wait before evicting a pod again after a PodDisruptionBudget refused it")
	fs.DurationVar(&o.DrainTimeout, "default-drain-timeout", o.DrainTimeout, "drain deadline for groups without nodeDrainTimeoutSecond")
	fs.StringVar(&o.FencingAgentImage, "fencing-agent-image", o.FencingAgentImage, "image of the fencing agents' DaemonSets, one per group with spec.fencing")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "the node this process runs on; it is not drained while it is its group's only Ready node")
	o.Serving.AddFlags(fs)
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	// The identity and the Lease's timing matter only to leader election.
	if o.LeaderElect && o.Identity == "" {
		errs = append(errs, errors.New("--identity is empty and the host name is unknown; set --identity"))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers=%d: at least 1 is needed", o.Workers))
	}
	if o.LeaderElect && o.RenewDeadline >= o.LeaseDuration {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be shorter than --leader-elect-lease-duration (%s)", o.RenewDeadline, o.LeaseDuration))
	}
	if o.EvictionRetry <= 0 || o.DrainTimeout <= 0 {
		errs = append(errs, errors.New("--eviction-retry-interval and --default-drain-timeout must be positive"))
	}
	errs = append(errs, o.Serving.Validate()...)
	return errors.Join(errs...)
}
