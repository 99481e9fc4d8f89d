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

// DefaultDrainTimeout is the deadline of a drain of a node whose group
// sets no nodeDrainTimeoutSecond: a refused eviction is retried (every
// --eviction-retry-interval) for 5 minutes, after which the pods left are
// deleted (drainTimeoutPolicy Delete), as the node-manager documentation
// this project follows promises for a disruptive update.
const DefaultDrainTimeout = 5 * time.Minute

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

	// EvictionRetry is how long a drain waits before evicting a pod again
	// after a PodDisruptionBudget refused it.
	EvictionRetry time.Duration
	// DrainTimeout applies to groups without nodeDrainTimeoutSecond
	// (DefaultDrainTimeout unless --default-drain-timeout says otherwise).
	DrainTimeout time.Duration
	// FencingAgentImage is the image of the fencing agents' DaemonSets
	// (controllers/fencingagents).
	FencingAgentImage string
	// FencingGossipKeyRotationPeriod is how old a fenced group's gossip key
	// gets before node-manager-controller rotates it (0: only on demand).
	FencingGossipKeyRotationPeriod time.Duration
	// NodeName is the node this process runs on (the Deployment passes
	// spec.nodeName): while it is its group's only Ready node, it is not
	// drained for an update, as Deckhouse spares its own node.
	NodeName string

	// Fencing configures the fencing controller (controllers/fencing).
	Fencing FencingOptions

	// ClusterAPI turns on the clusterapi controller (controllers/clusterapi):
	// Cluster API objects for static groups with staticInstances. It needs
	// Cluster API's CRDs and capi-controller-manager, which not every
	// installation runs, hence off by default.
	ClusterAPI bool
	// ClusterAPIKubeconfig is a kubeconfig file whose content the controller
	// stores in the Cluster's kubeconfig Secret (static-kubeconfig), for a
	// capi-controller-manager that runs outside the cluster (make run, the
	// e2e harness). Empty: a kubeconfig of the in-cluster API that
	// authenticates with the reading pod's own ServiceAccount token.
	ClusterAPIKubeconfig string

	// Certificates configures the certificates controller
	// (controllers/certificates).
	Certificates CertificateOptions
}

// CertificateOptions: whether node-manager-controller keeps the CA, the
// serving certificates and the caBundles (controllers/certificates), and
// their lifetimes.
type CertificateOptions struct {
	// Manage turns the controller on (the default; off where something
	// else, such as cert-manager or a test harness, provides them).
	Manage bool
	// CALifetime and LeafLifetime are how long a new CA and a new serving
	// certificate are valid. Each is renewed at two thirds of its life.
	CALifetime, LeafLifetime time.Duration
	// PropagationDelay is how long a change takes to reach everyone who
	// acts on it: a caBundle written to an APIService or webhook
	// configuration to kube-apiserver's caches, a serving certificate
	// written to a Secret to the pods that mount it (the kubelet's sync
	// period and Secret cache, then the server's file reload). A new CA
	// signs only once it has been trusted for that long, and an old CA
	// leaves the bundles only once the last certificate re-issued away from
	// it has been written for that long.
	PropagationDelay time.Duration
}

func (o *CertificateOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Manage, "manage-certificates", o.Manage, "keep a CA (Secret "+deckhousev1.CertificateAuthoritySecret+"), the serving certificates of bashible-api and capi-webhook-service, and the caBundle of every APIService, webhook configuration and CRD labelled "+deckhousev1.InjectCABundleLabel+"=true that points at them; false when cert-manager (manifests/cert-manager) or something else provides them")
	fs.DurationVar(&o.CALifetime, "ca-lifetime", o.CALifetime, "lifetime of a new CA; it is rotated at two thirds of it")
	fs.DurationVar(&o.LeafLifetime, "serving-certificate-lifetime", o.LeafLifetime, "lifetime of a new serving certificate; it is renewed at two thirds of it")
	fs.DurationVar(&o.PropagationDelay, "certificate-propagation-delay", o.PropagationDelay, "how long a written caBundle takes to reach kube-apiserver and a written Secret the servers that mount it (the kubelet's sync period and Secret cache, then the file reload): a new CA signs, and an old CA leaves the bundles, only that long after the change before")
}

// Validate says what is wrong with the lifetimes: every rotation must be
// able to end before what it replaces expires.
func (o CertificateOptions) Validate() error {
	switch {
	case o.CALifetime <= 0 || o.LeafLifetime <= 0 || o.PropagationDelay < 0:
		return fmt.Errorf("--ca-lifetime (%s) and --serving-certificate-lifetime (%s) must be positive, --certificate-propagation-delay (%s) not negative",
			o.CALifetime, o.LeafLifetime, o.PropagationDelay)
	case o.LeafLifetime > o.CALifetime:
		return fmt.Errorf("--serving-certificate-lifetime (%s) must not exceed --ca-lifetime (%s)", o.LeafLifetime, o.CALifetime)
	case o.LeafLifetime/3 <= o.PropagationDelay:
		return fmt.Errorf("--serving-certificate-lifetime (%s) must exceed three times --certificate-propagation-delay (%s): a certificate is renewed at two thirds of its life and its successor must reach the servers before it expires",
			o.LeafLifetime, o.PropagationDelay)
	case o.CALifetime/3 <= 2*o.PropagationDelay:
		return fmt.Errorf("--ca-lifetime (%s) must exceed six times --certificate-propagation-delay (%s): a CA is rotated at two thirds of its life, its successor is trusted for one delay before it signs, and the certificates it signs take another to reach the servers, all before the old CA expires",
			o.CALifetime, o.PropagationDelay)
	}
	return nil
}

// FencingOptions are the fencing controller's timing, its blast-radius cap
// and its outage guard. The agents' timings must be what the fencing agents
// run with: the controller checks its margin against them (the inequality
// in apiserver/apis/deckhouse/v1/fencing_timing.go).
type FencingOptions struct {
	// Margin is added to a group's watchdog timeout: a node whose Lease has
	// not been renewed for longer is dead.
	Margin time.Duration
	// AgentAPITimeout and AgentFeedInterval are the fencing agents'
	// --api-timeout and --feed-interval; LeaseRenewInterval the kubelets'.
	AgentAPITimeout    time.Duration
	AgentFeedInterval  time.Duration
	LeaseRenewInterval time.Duration
	// Interval, MaxNodes and MaxPercent are the blast-radius cap: at most
	// MaxNodes, or MaxPercent of a group's nodes if that is more, fenced per
	// group in any Interval.
	Interval   time.Duration
	MaxNodes   int
	MaxPercent int
	// OutagePercent and OutageMinNodes are the outage guard: when more than
	// OutagePercent of the fenced nodes, and at least OutageMinNodes, have
	// stopped renewing their Leases at once, nobody is fenced. APIViewTimeout: when no node's Lease
	// renewal has been seen for longer, nobody is fenced either.
	OutagePercent  int
	OutageMinNodes int
	APIViewTimeout time.Duration
}

func newFencingOptions() FencingOptions {
	return FencingOptions{
		Margin:             deckhousev1.DefaultFencingMargin,
		AgentAPITimeout:    deckhousev1.DefaultFencingAgentAPITimeout,
		AgentFeedInterval:  deckhousev1.DefaultFencingAgentFeedInterval,
		LeaseRenewInterval: deckhousev1.KubeletLeaseRenewInterval,
		Interval:           time.Minute,
		MaxNodes:           1,
		MaxPercent:         20,
		OutagePercent:      50,
		OutageMinNodes:     2,
		APIViewTimeout:     3 * deckhousev1.KubeletLeaseRenewInterval,
	}
}

func (o *FencingOptions) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Margin, "fencing-margin", o.Margin, "a fenced node is dead when its Lease has not been renewed for its group's watchdog timeout plus this; must exceed --fencing-lease-renew-interval + --fencing-agent-api-timeout + --fencing-agent-feed-interval, or no node is fenced")
	fs.DurationVar(&o.AgentAPITimeout, "fencing-agent-api-timeout", o.AgentAPITimeout, "the fencing agents' --api-timeout")
	fs.DurationVar(&o.AgentFeedInterval, "fencing-agent-feed-interval", o.AgentFeedInterval, "the fencing agents' --feed-interval")
	fs.DurationVar(&o.LeaseRenewInterval, "fencing-lease-renew-interval", o.LeaseRenewInterval, "how often the kubelets renew their node Leases (a quarter of nodeLeaseDurationSeconds)")
	fs.DurationVar(&o.Interval, "fencing-interval", o.Interval, "the window of the fencing blast-radius cap")
	fs.IntVar(&o.MaxNodes, "fencing-max-nodes-per-interval", o.MaxNodes, "at most this many nodes of a group are fenced per --fencing-interval (or --fencing-max-percent-per-interval of the group, if that is more)")
	fs.IntVar(&o.MaxPercent, "fencing-max-percent-per-interval", o.MaxPercent, "at most this percentage of a group's nodes is fenced per --fencing-interval (or --fencing-max-nodes-per-interval, if that is more)")
	fs.IntVar(&o.OutagePercent, "fencing-outage-percent", o.OutagePercent, "when more than this percentage of the fenced nodes has stopped renewing their Leases at once (and at least --fencing-outage-min-nodes), nobody is fenced")
	fs.IntVar(&o.OutageMinNodes, "fencing-outage-min-nodes", o.OutageMinNodes, "the outage guard holds only when at least this many fenced nodes have stopped renewing their Leases")
	fs.DurationVar(&o.APIViewTimeout, "fencing-api-view-timeout", o.APIViewTimeout, "when no node's Lease renewal has been seen for longer than this, the controller's view of the API is stale and nobody is fenced")
}

func (o *FencingOptions) validate() []error {
	var errs []error
	for name, d := range map[string]time.Duration{"--fencing-margin": o.Margin, "--fencing-agent-api-timeout": o.AgentAPITimeout,
		"--fencing-agent-feed-interval": o.AgentFeedInterval, "--fencing-lease-renew-interval": o.LeaseRenewInterval,
		"--fencing-interval": o.Interval, "--fencing-api-view-timeout": o.APIViewTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%s: must be positive", name, d))
		}
	}
	if o.MaxNodes < 1 {
		errs = append(errs, fmt.Errorf("--fencing-max-nodes-per-interval=%d: at least 1 is needed, or no dead node is ever fenced", o.MaxNodes))
	}
	if o.MaxPercent < 0 || o.MaxPercent > 100 || o.OutagePercent < 0 || o.OutagePercent > 100 {
		errs = append(errs, errors.New("--fencing-max-percent-per-interval and --fencing-outage-percent are percentages (0 to 100)"))
	}
	if o.OutageMinNodes < 1 {
		errs = append(errs, fmt.Errorf("--fencing-outage-min-nodes=%d: at least 1 is needed", o.OutageMinNodes))
	}
	return errs
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
		EvictionRetry: 20 * time.Second,
		DrainTimeout:  DefaultDrainTimeout,
		// The image's name as the manifests' kustomization names it (a
		// kustomize images transformer, or the flag, sets the real one).
		FencingAgentImage:              deckhousev1.FencingAgentName,
		FencingGossipKeyRotationPeriod: 30 * 24 * time.Hour,
		Serving:                        serving.NewOptions(),
		Fencing:                        newFencingOptions(),
		Certificates: CertificateOptions{
			Manage:           true,
			CALifetime:       10 * 365 * 24 * time.Hour,
			LeafLifetime:     365 * 24 * time.Hour,
			PropagationDelay: 10 * time.Minute,
		},
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

// AddNodeManagerFlags registers the options of node-manager-controller's
// controllers (draining, fencing, Cluster API wiring), which
// caps-controller-manager does not run and so does not offer.
func (o *Options) AddNodeManagerFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.EvictionRetry, "eviction-retry-interval", o.EvictionRetry, "wait before evicting a pod again after a PodDisruptionBudget refused it")
	fs.DurationVar(&o.DrainTimeout, "default-drain-timeout", o.DrainTimeout, "drain deadline for groups without nodeDrainTimeoutSecond")
	fs.StringVar(&o.FencingAgentImage, "fencing-agent-image", o.FencingAgentImage, "image of the fencing agents' DaemonSets, one per group with spec.fencing")
	fs.DurationVar(&o.FencingGossipKeyRotationPeriod, "fencing-gossip-key-rotation-period", o.FencingGossipKeyRotationPeriod, "rotate a fenced group's gossip key once it is this old (0: only when its Secret carries node-manager.deckhouse.io/rotate-gossip-key)")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "the node this process runs on; it is not drained while it is its group's only Ready node")
	fs.BoolVar(&o.ClusterAPI, "cluster-api", o.ClusterAPI, "write the Cluster API objects of static groups with staticInstances (Cluster, MachineDeployments, StaticMachineTemplates) and link Instances to their Machines; needs Cluster API's CRDs and capi-controller-manager")
	fs.StringVar(&o.ClusterAPIKubeconfig, "cluster-api-kubeconfig", o.ClusterAPIKubeconfig, "kubeconfig file stored in the static-kubeconfig Secret for a capi-controller-manager running outside the cluster; empty means the in-cluster API with capi-controller-manager's own ServiceAccount token")
	o.Fencing.addFlags(fs)
	o.Certificates.addFlags(fs)
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

// ValidateNodeManager checks the options AddNodeManagerFlags registers.
func (o *Options) ValidateNodeManager() error {
	var errs []error
	if o.EvictionRetry <= 0 || o.DrainTimeout <= 0 {
		errs = append(errs, errors.New("--eviction-retry-interval and --default-drain-timeout must be positive"))
	}
	errs = append(errs, o.Fencing.validate()...)
	if o.Certificates.Manage {
		errs = append(errs, o.Certificates.Validate())
	}
	return errors.Join(errs...)
}
