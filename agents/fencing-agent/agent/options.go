package agent

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/internal/serving"
)

// Options are the fencing agent's command-line settings. The DaemonSet
// passes the node and group through the environment (NODE_NAME from
// spec.nodeName, NODE_GROUP from the group it was made for), which are
// the flags' defaults.
type Options struct {
	Config
	// DevicePath is the watchdog device; never opened in Notify mode.
	DevicePath string
	Kubeconfig string
	// APIServer, when set, replaces the server of the kubeconfig (or of
	// the in-cluster configuration), keeping its credentials and CA: the
	// DaemonSet points the agent at the node's local API proxy
	// (deckhousev1.NodeAPIProxyURL), the kubelet's own path to the API.
	APIServer string
	// ListenAddress serves /metrics (authenticated and authorized) and the
	// probes (open), over HTTPS.
	ListenAddress string
	Serving       serving.Options
	// GossipBindAddress and AdvertiseAddress are where the gossip listens
	// and where peers reach it (the DaemonSet runs on the host network,
	// so the node's address).
	GossipBindAddress string
	AdvertiseAddress  string
	// ProbeInterval tunes how fast gossip notices a member gone.
	ProbeInterval time.Duration
	// GossipKeyDir is the group's gossip keyring, its Secret as mounted.
	GossipKeyDir string
}

// DefaultGossipKeyDir is where the DaemonSet mounts the group's gossip
// keyring Secret.
const DefaultGossipKeyDir = "/etc/fencing-agent/gossip-key"

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Config: Config{
			NodeName:        os.Getenv("NODE_NAME"),
			Group:           os.Getenv("NODE_GROUP"),
			Mode:            deckhousev1.FencingModeWatchdog,
			FeedInterval:    deckhousev1.DefaultFencingAgentFeedInterval,
			APITimeout:      deckhousev1.DefaultFencingAgentAPITimeout,
			LeaseStaleAfter: deckhousev1.DefaultFencingAgentLeaseStaleAfter,
			RejoinInterval:  10 * time.Second,
			GossipPort:      9682,
		},
		DevicePath:        "/dev/watchdog",
		ListenAddress:     ":9681",
		Serving:           serving.NewOptions(),
		GossipBindAddress: os.Getenv("HOST_IP"),
		AdvertiseAddress:  os.Getenv("HOST_IP"),
		ProbeInterval:     time.Second,
		GossipKeyDir:      DefaultGossipKeyDir,
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "the Node this agent runs on (default $NODE_NAME)")
	fs.StringVar(&o.Group, "node-group", o.Group, "the node's NodeGroup (default $NODE_GROUP)")
	fs.StringVar(&o.Mode, "mode", o.Mode, "the group's spec.fencing.mode: Watchdog (arm the device) or Notify (detect and label only; the device is never opened)")
	fs.StringVar(&o.DevicePath, "watchdog-device", o.DevicePath, "the watchdog device (softdog's, made by the node step)")
	fs.DurationVar(&o.FeedInterval, "feed-interval", o.FeedInterval, "how often the API is checked and the watchdog fed; keep it well inside the watchdog timeout")
	fs.DurationVar(&o.APITimeout, "api-timeout", o.APITimeout, "bound of each check of the API (a GET of the agent's own Node and its Lease); shorter than --feed-interval")
	fs.DurationVar(&o.LeaseStaleAfter, "lease-stale-after", o.LeaseStaleAfter, "stop feeding, though the API answers, once the node's kube-node-lease Lease is older than this (the kubelet is not renewing it); keep it below node-manager-controller's --fencing-margin")
	fs.DurationVar(&o.RejoinInterval, "rejoin-interval", o.RejoinInterval, "how often gossip peers that were lost are contacted again")
	fs.StringSliceVar(&o.Peers, "peers", o.Peers, "gossip peers (host:port) to join besides the InternalIP of each of the group's Nodes at --gossip-port")
	fs.IntVar(&o.GossipPort, "gossip-port", o.GossipPort, "gossip port (TCP and UDP), the same on every node of the group")
	fs.StringVar(&o.GossipBindAddress, "gossip-bind-address", o.GossipBindAddress, "address the gossip listens on: the node's InternalIP (default $HOST_IP, status.hostIP), never every address")
	fs.StringVar(&o.AdvertiseAddress, "gossip-advertise-address", o.AdvertiseAddress, "address peers reach this agent at (default $HOST_IP; the DaemonSet runs on the host network)")
	fs.StringVar(&o.GossipKeyDir, "gossip-key-dir", o.GossipKeyDir, "the group's gossip keyring: the Secret fencing-agent-gossip-<group> mounted as files (primary, and next or previous during a rotation); re-read as the kubelet updates it. Without it the agent does not gossip and does not arm")
	fs.DurationVar(&o.ProbeInterval, "gossip-probe-interval", o.ProbeInterval, "how often gossip probes a member; a silent member is declared dead a few intervals later")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty means in-cluster configuration (the pod's bound ServiceAccount token)")
	fs.StringVar(&o.APIServer, "api-server", o.APIServer, "the API server URL to check and use, replacing the kubeconfig's (or in-cluster) server but keeping its credentials and CA; the DaemonSet passes the node's local API proxy, "+deckhousev1.NodeAPIProxyURL+", which the kubelet uses, so a broken Service path on one node does not reset it")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "address of /metrics (HTTPS; callers authenticated and authorized by the Kubernetes API), /healthz and /readyz (open)")
	o.Serving.AddFlags(fs)
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name is empty (and NODE_NAME unset); the DaemonSet passes spec.nodeName"))
	}
	if o.Group == "" {
		errs = append(errs, errors.New("--node-group is empty (and NODE_GROUP unset)"))
	}
	if o.Mode != deckhousev1.FencingModeWatchdog && o.Mode != deckhousev1.FencingModeNotify {
		errs = append(errs, fmt.Errorf("--mode=%q: want %s or %s", o.Mode, deckhousev1.FencingModeWatchdog, deckhousev1.FencingModeNotify))
	}
	if o.FeedInterval <= 0 || o.APITimeout <= 0 || o.RejoinInterval <= 0 || o.ProbeInterval <= 0 || o.LeaseStaleAfter <= 0 {
		errs = append(errs, errors.New("--feed-interval, --api-timeout, --rejoin-interval, --gossip-probe-interval and --lease-stale-after must be positive"))
	}
	if o.APITimeout >= o.FeedInterval {
		errs = append(errs, fmt.Errorf("--api-timeout (%s) must be shorter than --feed-interval (%s), or a slow API delays the feeds", o.APITimeout, o.FeedInterval))
	}
	if ip := net.ParseIP(o.GossipBindAddress); ip == nil || ip.IsUnspecified() {
		errs = append(errs, fmt.Errorf("--gossip-bind-address=%q: want the node's InternalIP (the DaemonSet passes status.hostIP as $HOST_IP), not every address", o.GossipBindAddress))
	}
	if o.GossipKeyDir == "" {
		errs = append(errs, errors.New("--gossip-key-dir is empty; the agents never gossip in the clear"))
	}
	if o.GossipPort <= 0 || o.GossipPort > 65535 {
		errs = append(errs, fmt.Errorf("--gossip-port=%d is not a port", o.GossipPort))
	}
	for _, p := range o.Peers {
		if !strings.Contains(p, ":") {
			errs = append(errs, fmt.Errorf("--peers: %q is not host:port", p))
		}
	}
	if o.APIServer != "" {
		if u, err := url.Parse(o.APIServer); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--api-server=%q: want an https URL such as %s", o.APIServer, deckhousev1.NodeAPIProxyURL))
		}
	}
	errs = append(errs, o.Serving.Validate()...)
	return errors.Join(errs...)
}

// RESTConfig is the agent's API client configuration: the kubeconfig's
// (in-cluster when none), with its server replaced by APIServer when set.
func (o *Options) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the API client configuration (--kubeconfig %q, or in-cluster): %w", o.Kubeconfig, err)
	}
	if o.APIServer != "" {
		cfg.Host = o.APIServer
	}
	cfg.UserAgent = deckhousev1.FencingAgentName
	return cfg, nil
}
