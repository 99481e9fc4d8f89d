package manager

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/internal/serving"
)

// Options are the command-line settings.
type Options struct {
	// Component is the process's name: its user agent, Event source and
	// leader Lease. node-manager-controller by default; caps-controller-
	// manager runs the same manager under its own name (and identity).
	Component     string
	Kubeconfig    string
	Namespace     string
	Identity      string
	ListenAddress string
	Workers       int
	// APIQPS and APIBurst bound the requests every controller of the
	// process sends together (client-go's token bucket). client-go's own
	// default, 5 per second, is for tools, not for a controller of
	// thousands of nodes: there every approval waited behind the node
	// template's writes of the whole fleet, and a rollout over a
	// 1,000-node group moved one batch in minutes. kube-apiserver's
	// priority and fairness protects the server.
	APIQPS   float32
	APIBurst int
	// Serving: HTTPS and delegated authentication and authorization of
	// /metrics (see serving.Options).
	Serving serving.Options
	// Profiling serves Go's /debug/pprof next to /metrics, to the same
	// authenticated and authorized callers (as kube-controller-manager
	// does): heap and CPU profiles of a controller with a large fleet.
	Profiling bool

	// LeaderElect runs the controllers only while this process holds the
	// Lease (the default, so that two replicas never act at once). Without
	// it the controllers run as soon as the informers have synced: for a
	// single process that is sure to be alone, such as a test suite.
	LeaderElect   bool
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	host, _ := os.Hostname()
	return &Options{
		Component:     deckhousev1.NodeManagerControllerName,
		Namespace:     deckhousev1.Namespace,
		Identity:      host,
		ListenAddress: ":9680",
		Workers:       2,
		APIQPS:        50,
		APIBurst:      100,
		LeaderElect:   true,
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
		Serving:       serving.NewOptions(),
	}
}

// AddFlags registers the manager's own options, which every binary built
// on it has: the connection, the identity and leader election, /metrics
// and the probes, the workers.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty means in-cluster configuration")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of node-manager's Secrets and Lease")
	fs.StringVar(&o.Identity, "identity", o.Identity, "leader election identity (defaults to the host name)")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "address of /metrics (HTTPS; callers authenticated and authorized by the Kubernetes API), /healthz and /readyz (open)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "workers per controller")
	fs.Float32Var(&o.APIQPS, "kube-api-qps", o.APIQPS, "requests per second to the Kubernetes API, all controllers together")
	fs.IntVar(&o.APIBurst, "kube-api-burst", o.APIBurst, "requests to the Kubernetes API allowed at once above --kube-api-qps")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve /debug/pprof on --listen-address, to callers authenticated and authorized as for /metrics (get on the non-resource URL /debug/pprof/*)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run the controllers only while holding the Lease; false runs them at once, for a process that is sure to be alone")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "leader Lease duration")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader keeps trying to renew")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often candidates try to take the Lease")
	o.Serving.AddFlags(fs)
}

// Validate checks the manager's own options (AddFlags).
func (o *Options) Validate() error {
	var errs []error
	// The identity and the Lease's timing matter only to leader election.
	if o.LeaderElect && o.Identity == "" {
		errs = append(errs, errors.New("--identity is empty and the host name is unknown; set --identity"))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers=%d: at least 1 is needed", o.Workers))
	}
	if o.APIQPS <= 0 || o.APIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps=%g and --kube-api-burst=%d: both must be positive", o.APIQPS, o.APIBurst))
	}
	if o.LeaderElect && o.RenewDeadline >= o.LeaseDuration {
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be shorter than --leader-elect-lease-duration (%s)", o.RenewDeadline, o.LeaseDuration))
	}
	errs = append(errs, o.Serving.Validate()...)
	return errors.Join(errs...)
}
