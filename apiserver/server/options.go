package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apiserver/pkg/features"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/templates"
	"github.com/node-manager/node-manager/templates/sandbox"
)

// Options are bashible-apiserver's command-line options: the generic
// server's (secure serving, delegated authentication and authorization,
// the core API client) plus its own.
type Options struct {
	Generic *genericoptions.RecommendedOptions

	// TemplatesDir is layered over the built-in template tree.
	TemplatesDir string
	// BundlesNamespace holds the published bundles and the leader Lease. It
	// must be a namespace where only bashible-apiserver may write Secrets
	// (see package bundles): whoever can write there authors what nodes run.
	BundlesNamespace string
	// Identity names this replica in the leader Lease.
	Identity string
	// RevisionHistory is how many revisions of each group's bundle are
	// kept, for pinning a group to an earlier one.
	RevisionHistory int
	// Render bounds the rendering of NodeGroupConfigurations.
	Render RenderOptions
	// LeaderElection times the Lease of the publishing replica.
	LeaderElection LeaderElectionOptions
	// ShutdownDelay is how long a replica told to stop keeps serving with
	// /readyz failing, so that the Service stops sending it requests before
	// it closes its port (a rolling restart then costs clients nothing).
	ShutdownDelay time.Duration
	// APIQPS and APIBurst bound the requests of the server's clients of the
	// cluster (publishing, status reports, leader election); client-go's
	// own defaults (5 and 10) made a publish at 100 groups wait seconds for
	// its status writes, and changes wait behind a publish.
	APIQPS   float32
	APIBurst int
	// ResponseCompression lets the server gzip responses of 128 KB and
	// more for clients that ask (k8s.io/apiserver's APIResponseCompression).
	// Off by default: nodes fetch with curl, which does not ask, and
	// kube-apiserver's aggregator asks on every request it proxies for a
	// client that did not, then decompresses the answer itself, so every
	// node's GET of a bashibles object (over 128 KB) cost both servers a
	// compression for nothing (39 % of bashible-apiserver's CPU and
	// 17 MB of compressor state with 5,000 nodes polling).
	ResponseCompression bool
}

// LeaderElectionOptions time the Lease: a leader that cannot renew it for
// RenewDeadline stops publishing, and another replica may take it once it
// has not been renewed for LeaseDuration; RenewDeadline below LeaseDuration
// is what keeps two replicas from publishing at once.
type LeaderElectionOptions struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// RenderOptions bound what rendering may spend. NodeGroupConfiguration
// templates render in worker processes (templates/sandbox), each limited
// to RenderTimeout of wall-clock time and CPU per template and
// WorkerMemory bytes; Workers groups render at once, each with at most one
// worker busy. The container's memory limit must hold the server plus
// Workers times WorkerMemory.
type RenderOptions struct {
	Workers      int
	Timeout      time.Duration
	WorkerMemory string
	// WorkerIdleTimeout stops a render worker idle for longer; 0 keeps
	// idle workers.
	WorkerIdleTimeout time.Duration
	// WorkerBinary is the executable a render worker runs; empty means
	// bashible-render-worker beside this executable (see
	// renderWorkerBinary).
	WorkerBinary string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	generic := genericoptions.NewRecommendedOptions("", Codecs.LegacyCodec(bashiblev1alpha1.SchemeGroupVersion))
	// Nothing is stored and nothing is admitted: every object is computed
	// and read-only.
	generic.Etcd = nil
	generic.Admission = nil
	generic.SecureServing.BindPort = 10423
	generic.SecureServing.MinTLSVersion = "VersionTLS12"
	// kube-apiserver calls the CRDs' conversion webhook without credentials
	// (it has no configuration that would give it any): the path is served
	// to an anonymous caller without asking kube-apiserver, as /healthz is.
	// Its answer is a pure function of the posted objects (see
	// conversion.Webhook).
	generic.Authorization = generic.Authorization.WithAlwaysAllowPaths(bashiblev1alpha1.ConversionWebhookPath)
	hostname, _ := os.Hostname()
	return &Options{Generic: generic, BundlesNamespace: deckhousev1.BundlesNamespace, Identity: hostname, RevisionHistory: bundles.DefaultRevisionHistory,
		Render:         RenderOptions{Workers: sandbox.DefaultWorkers, Timeout: templates.DefaultTimeout, WorkerMemory: "128Mi", WorkerIdleTimeout: sandbox.DefaultIdleTimeout},
		LeaderElection: LeaderElectionOptions{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second},
		APIQPS:         50, APIBurst: 100}
}

// AddFlags adds every option to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Generic.AddFlags(fs)
	fs.StringVar(&o.TemplatesDir, "templates-dir", o.TemplatesDir,
		"a directory layered over the built-in template tree: its files replace built-in ones of the same path, and an empty file removes one")
	fs.StringVar(&o.BundlesNamespace, "bundles-namespace", o.BundlesNamespace,
		"namespace of the published bundle Secrets and the leader Lease; only bashible-apiserver's identity may be allowed to write Secrets there, since whoever can authors what nodes run")
	fs.StringVar(&o.Identity, "identity", o.Identity, "this replica's name in the leader Lease (default: the hostname)")
	fs.IntVar(&o.RevisionHistory, "revision-history", o.RevisionHistory,
		"how many revisions of each node group's bundle to keep (Secrets in --bundles-namespace) for pinning a group to an earlier one with spec.update.pinnedRevision; a pinned revision is kept besides these")
	fs.IntVar(&o.Render.Workers, "render-workers", o.Render.Workers,
		"how many node groups render at once; each may use one render worker process")
	fs.DurationVar(&o.Render.Timeout, "render-timeout", o.Render.Timeout,
		"wall-clock and CPU time one NodeGroupConfiguration template may take before its render worker is stopped")
	fs.StringVar(&o.Render.WorkerMemory, "render-worker-memory", o.Render.WorkerMemory,
		"memory one render worker process may use (a quantity such as 128Mi); a template that needs more is stopped")
	fs.DurationVar(&o.Render.WorkerIdleTimeout, "render-worker-idle-timeout", o.Render.WorkerIdleTimeout,
		"a render worker process idle for longer is stopped, and its memory returned (the next render starts one, in about 0.05s); 0 keeps idle workers")
	fs.StringVar(&o.Render.WorkerBinary, "render-worker-binary", o.Render.WorkerBinary,
		"the executable render workers run (default: "+deckhousev1.BashibleRenderWorkerName+" in the directory of this executable, as the image ships it); "+deckhousev1.BashibleAPIServerName+"'s own path works too, with workers holding about 14 MiB more each")
	fs.DurationVar(&o.LeaderElection.LeaseDuration, "leader-elect-lease-duration", o.LeaderElection.LeaseDuration,
		"how long after the publishing replica's last renewal another replica may take its Lease")
	fs.DurationVar(&o.LeaderElection.RenewDeadline, "leader-elect-renew-deadline", o.LeaderElection.RenewDeadline,
		"how long the publishing replica keeps trying to renew its Lease before it stops publishing; must be below --leader-elect-lease-duration")
	fs.DurationVar(&o.LeaderElection.RetryPeriod, "leader-elect-retry-period", o.LeaderElection.RetryPeriod,
		"how often replicas try to take or renew the Lease")
	fs.Float32Var(&o.APIQPS, "kube-api-qps", o.APIQPS, "requests per second to the Kubernetes API (publishing bundles, status reports, the leader Lease)")
	fs.IntVar(&o.APIBurst, "kube-api-burst", o.APIBurst, "requests to the Kubernetes API allowed at once above --kube-api-qps")
	fs.BoolVar(&o.ResponseCompression, "response-compression", o.ResponseCompression,
		"gzip responses of 128 KB and more for clients that ask; off by default, since nodes do not ask and kube-apiserver's aggregator, which asks for them, decompresses what it proxies")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay-duration", o.ShutdownDelay,
		"how long a replica told to stop keeps serving, with /readyz failing, before it closes its port; set it above the time the Service takes to drop a replica that is not ready")
}

// applyFeatureGates sets the k8s.io/apiserver feature gates the options
// decide (process-wide, as k8s.io/apiserver reads them).
func (o *Options) applyFeatureGates() error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.APIResponseCompression): o.ResponseCompression}); err != nil {
		return fmt.Errorf("--response-compression: %w", err)
	}
	return nil
}

// renderWorkerBinary is the executable render workers run, as an absolute
// path (exec would look a bare name up in $PATH, not where Validate found
// it): the flag's, or bashible-render-worker in this executable's
// directory, as the image ships it.
func (o *Options) renderWorkerBinary() (string, error) {
	if o.Render.WorkerBinary != "" {
		abs, err := filepath.Abs(o.Render.WorkerBinary)
		if err != nil {
			return "", fmt.Errorf("--render-worker-binary %q: %w", o.Render.WorkerBinary, err)
		}
		return abs, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this executable to look for %s beside it: %w; pass --render-worker-binary", deckhousev1.BashibleRenderWorkerName, err)
	}
	beside := filepath.Join(filepath.Dir(self), deckhousev1.BashibleRenderWorkerName)
	if err := executable(beside); err != nil {
		return "", fmt.Errorf("render workers run %s, which is missing or not executable beside %s: %w; install it there (the image does, make build builds it into bin/) or pass --render-worker-binary (this executable's own path works too, with workers holding about 14 MiB more each)",
			deckhousev1.BashibleRenderWorkerName, deckhousev1.BashibleAPIServerName, err)
	}
	return beside, nil
}

// executable says why path is not a regular file someone may execute.
func executable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file (mode %s)", path, info.Mode())
	}
	return nil
}

// workerMemory is --render-worker-memory in bytes.
func (o *Options) workerMemory() (int64, error) {
	q, err := resource.ParseQuantity(o.Render.WorkerMemory)
	if err != nil {
		return 0, fmt.Errorf("--render-worker-memory %q: %w", o.Render.WorkerMemory, err)
	}
	if q.Value() < 16<<20 {
		return 0, fmt.Errorf("--render-worker-memory %s is below 16Mi, too little for a render", o.Render.WorkerMemory)
	}
	return q.Value(), nil
}

// Validate checks the options.
func (o *Options) Validate() error {
	errs := o.Generic.Validate()
	if o.BundlesNamespace == "" {
		errs = append(errs, errors.New("--bundles-namespace must not be empty"))
	}
	if o.Identity == "" {
		errs = append(errs, errors.New("--identity must not be empty (the hostname is unknown)"))
	}
	if o.RevisionHistory < 1 {
		errs = append(errs, fmt.Errorf("--revision-history %d must be at least 1 (the current revision)", o.RevisionHistory))
	}
	if o.Render.Workers < 1 {
		errs = append(errs, fmt.Errorf("--render-workers %d must be at least 1", o.Render.Workers))
	}
	if o.Render.WorkerBinary != "" {
		if err := executable(o.Render.WorkerBinary); err != nil {
			errs = append(errs, fmt.Errorf("--render-worker-binary: %w", err))
		}
	}
	if o.Render.WorkerIdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("--render-worker-idle-timeout %s must not be negative (0 keeps idle workers)", o.Render.WorkerIdleTimeout))
	}
	if le := o.LeaderElection; le.RetryPeriod <= 0 || le.RenewDeadline <= le.RetryPeriod || le.LeaseDuration <= le.RenewDeadline {
		errs = append(errs, fmt.Errorf("leader election needs --leader-elect-retry-period (%s) < --leader-elect-renew-deadline (%s) < --leader-elect-lease-duration (%s), or two replicas could publish at once",
			le.RetryPeriod, le.RenewDeadline, le.LeaseDuration))
	}
	if o.APIQPS <= 0 || o.APIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps=%g and --kube-api-burst=%d: both must be positive", o.APIQPS, o.APIBurst))
	}
	if o.ShutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay-duration %s must not be negative", o.ShutdownDelay))
	}
	if o.Render.Timeout < time.Second {
		errs = append(errs, fmt.Errorf("--render-timeout %s must be at least 1s", o.Render.Timeout))
	}
	if _, err := o.workerMemory(); err != nil {
		errs = append(errs, err)
	}
	if o.TemplatesDir != "" {
		if info, err := os.Stat(o.TemplatesDir); err != nil || !info.IsDir() {
			errs = append(errs, fmt.Errorf("--templates-dir %q is not a readable directory", o.TemplatesDir))
		}
	}
	return errors.Join(errs...)
}

// Config turns the options into a server configuration. Without a serving
// certificate it generates a self-signed one for localhost.
func (o *Options) Config() (*Config, error) {
	if err := o.Generic.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("create a self-signed serving certificate: %w", err)
	}
	return newConfig(o)
}
