// Package manager runs node-manager-controller: it builds the clients and
// shared informers, serves metrics and probes, takes the leader Lease, and
// runs every controller while it holds the Lease (or, with
// --leader-elect=false, at once: a test suite runs its controllers so).
//
// A lost Lease (kube-apiserver out of reach for longer than the renew
// deadline, say) ends the term, not the process: every controller is
// stopped and joined, everything the term held in memory (informer caches,
// the Node cache, queues, running drains, the controllers' metrics) is
// dropped, and the process stands by again with fresh informers and
// campaigns once they have synced: the next term starts from the cluster
// alone, as a new process would.
package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nminformers "github.com/node-manager/node-manager/generated/informers/externalversions"
	"github.com/node-manager/node-manager/internal/leadership"
)

// Informers are the shared informer factories, one per scope so each
// controller watches only what it needs.
type Informers struct {
	Cluster informers.SharedInformerFactory // Nodes
	// KubeSystem sees only the kube-root-ca.crt ConfigMap of kube-system,
	// and Tokens only node-manager's bootstrap token Secrets there: not the
	// namespace's other Secrets.
	KubeSystem  informers.SharedInformerFactory
	Tokens      informers.SharedInformerFactory
	Namespace   informers.SharedInformerFactory // node-manager's Secrets
	Default     informers.SharedInformerFactory // the kubernetes EndpointSlice
	NodeManager nminformers.SharedInformerFactory
	// NodeLeases sees the Leases of kube-node-lease, the kubelets'
	// heartbeats (the fencing controller).
	NodeLeases informers.SharedInformerFactory
	// Bundles watches the aggregated nodegroupbundles. It is started but
	// not waited for: while bashible-apiserver is unavailable, the
	// controllers that need checksums wait, and the others (drains, node
	// templates, tokens, Instances) go on.
	Bundles nminformers.SharedInformerFactory
}

// factory is what the informer factories of both clientsets have in common.
type factory interface {
	Start(stop <-chan struct{})
	Shutdown()
	WaitForCacheSync(stop <-chan struct{}) map[reflect.Type]bool
}

// waited are the factories the manager waits for before campaigning;
// Bundles is started but not waited for (see its comment).
func (i *Informers) waited() []factory {
	return []factory{i.Cluster, i.KubeSystem, i.Tokens, i.Namespace, i.Default, i.NodeManager, i.NodeLeases}
}

func (i *Informers) start(stop <-chan struct{}) {
	for _, f := range append(i.waited(), i.Bundles) {
		f.Start(stop)
	}
}

// shutdown waits for the informers' goroutines once stop has been closed.
func (i *Informers) shutdown() {
	for _, f := range append(i.waited(), i.Bundles) {
		f.Shutdown()
	}
}

func (i *Informers) synced(stop <-chan struct{}) bool {
	for _, f := range i.waited() {
		for _, ok := range f.WaitForCacheSync(stop) {
			if !ok {
				return false
			}
		}
	}
	return true
}

// Deps is what every controller is built from.
type Deps struct {
	Kube        kubernetes.Interface
	NodeManager versioned.Interface
	// Dynamic reaches the kinds without a typed client here (Cluster API's
	// own objects); nil when built by NewDepsForClients.
	Dynamic dynamic.Interface
	// Metadata reads and writes objects' metadata only (the storage
	// migration, which never needs their content); nil when built by
	// NewDepsForClients.
	Metadata  metadata.Interface
	Informers *Informers
	Nodes     *nodes.Cache
	Recorder  events.EventRecorder
	Clock     clock.Clock
	// Registry registers the term's metrics: they are dropped with the
	// term (termMetrics).
	Registry  prometheus.Registerer
	Loops     *loop.Metrics
	Namespace string
	Options   *Options

	// process is the process's registry; metrics is Registry, which
	// registers on it.
	process prometheus.Registerer
	metrics *termMetrics
}

// Controller is one controller: Run blocks until ctx ends.
type Controller interface {
	Name() string
	Run(ctx context.Context, workers int)
}

// NewDeps builds clients (at opts.APIQPS and opts.APIBurst), informers and
// the event recorder.
func NewDeps(cfg *rest.Config, opts *Options, clk clock.Clock, reg prometheus.Registerer) (*Deps, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = opts.Component
	cfg.QPS, cfg.Burst = opts.APIQPS, opts.APIBurst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	nm, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the node-manager client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the metadata client: %w", err)
	}
	d := NewDepsForClients(kube, nm, opts, clk, reg)
	d.Dynamic, d.Metadata = dyn, meta
	return d, nil
}

// NewDepsForClients builds the rest from given clients (tests pass fakes).
// The metrics registered on the Deps' Registry go to reg.
func NewDepsForClients(kube kubernetes.Interface, nm versioned.Interface, opts *Options, clk clock.Clock, reg prometheus.Registerer) *Deps {
	metrics := &termMetrics{Registerer: reg}
	const resync = 10 * time.Minute
	transform, nmTransform := informers.WithTransform(slim), nminformers.WithTransform(slim)
	inf := &Informers{
		Cluster: informers.NewSharedInformerFactoryWithOptions(kube, resync, transform),
		KubeSystem: informers.NewSharedInformerFactoryWithOptions(kube, resync, transform, informers.WithNamespace(metav1.NamespaceSystem),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + deckhousev1.RootCAConfigMap })),
		Tokens: informers.NewSharedInformerFactoryWithOptions(kube, resync, transform, informers.WithNamespace(metav1.NamespaceSystem),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = deckhousev1.TokenNodeGroupLabel })),
		Namespace:   informers.NewSharedInformerFactoryWithOptions(kube, resync, transform, informers.WithNamespace(opts.Namespace)),
		Default:     informers.NewSharedInformerFactoryWithOptions(kube, resync, transform, informers.WithNamespace(metav1.NamespaceDefault)),
		NodeManager: nminformers.NewSharedInformerFactoryWithOptions(nm, resync, nmTransform),
		NodeLeases:  informers.NewSharedInformerFactoryWithOptions(kube, resync, transform, informers.WithNamespace(corev1.NamespaceNodeLease)),
		Bundles:     nminformers.NewSharedInformerFactoryWithOptions(nm, resync, nmTransform),
	}
	nodeInformer := inf.Cluster.Core().V1().Nodes()
	cache := nodes.NewCache(nodeInformer.Lister(), inf.NodeManager.Deckhouse().V1alpha1().Instances().Lister(), clk)
	_, _ = nodeInformer.Informer().AddEventHandler(nodes.CacheHandler(cache))
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	return &Deps{
		Kube:        kube,
		NodeManager: nm,
		Informers:   inf,
		Nodes:       cache,
		Recorder:    &recorder{EventRecorder: broadcaster.NewRecorder(eventScheme(), opts.Component), broadcaster: broadcaster},
		Clock:       clk,
		Registry:    metrics,
		Loops:       loop.NewMetrics(metrics),
		Namespace:   opts.Namespace,
		Options:     opts,
		process:     reg,
		metrics:     metrics,
	}
}

// next are the Deps of a new term: the same clients, options and clock;
// fresh informers, Node cache, event recorder and metrics.
func (d *Deps) next() *Deps {
	n := NewDepsForClients(d.Kube, d.NodeManager, d.Options, d.Clock, d.process)
	n.Dynamic, n.Metadata = d.Dynamic, d.Metadata
	return n
}

// Build makes the controllers of one term from its Deps, wiring them to
// the Deps' informers (controllers.All); the manager calls it before the
// informers start, once per term.
type Build func(d *Deps) []Controller

// Manager runs controllers: under leader election, or without it when
// Options.LeaderElect is off.
type Manager struct {
	deps        *Deps
	opts        *Options
	build       Build
	synced      atomic.Bool
	leading     atomic.Bool
	leaderGauge prometheus.Gauge
	terms       prometheus.Counter
}

// New makes a manager for the controllers build makes from deps (and,
// after a lost term, from fresh Deps of the same clients).
func New(deps *Deps, opts *Options, build Build) *Manager {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "node_manager_leader",
		Help: "1 while this process holds the node-manager-controller Lease and runs the controllers.",
	})
	terms := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "node_manager_leader_terms_total",
		Help: "Terms this process has led (held the Lease and run the controllers); more than one: it lost the Lease and took it again without a restart.",
	})
	deps.process.MustRegister(g, terms)
	return &Manager{deps: deps, opts: opts, build: build, leaderGauge: g, terms: terms}
}

// Leading reports whether this process holds the Lease.
func (m *Manager) Leading() bool { return m.leading.Load() }

// Handler serves /metrics, /healthz, /readyz and, with --profiling,
// /debug/pprof. /readyz is true while the
// informers of the current term have synced (after a lost term, once the
// fresh ones have); /healthz is always true: a lost Lease does not end the
// process, it stands by again.
func (m *Manager) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.synced.Load() {
			http.Error(w, "informers have not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	if m.opts.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Run runs terms until ctx ends. With Options.LeaderElect off there is one
// term, which runs the controllers as soon as the informers have synced.
// Otherwise each term builds its controllers, syncs its informers,
// campaigns for the Lease and runs the controllers while it holds it; a
// lost Lease ends the term, and the next one starts from fresh Deps. When
// ctx ends, the Lease is handed over if this process still holds it. Run
// returns an error only when ctx ends before the first informers synced.
func (m *Manager) Run(ctx context.Context) error {
	if !m.opts.LeaderElect {
		klog.FromContext(ctx).Info("Running the controllers without the Lease (--leader-elect=false)")
		return m.term(ctx, m.deps, func(ctx context.Context, lead func(context.Context)) { lead(ctx) })
	}
	e := leadership.Election{
		Lock:          leadership.LeaseLock(m.deps.Kube.CoordinationV1(), m.deps.Namespace, m.opts.Component, m.opts.Identity),
		LeaseDuration: m.opts.LeaseDuration,
		RenewDeadline: m.opts.RenewDeadline,
		RetryPeriod:   m.opts.RetryPeriod,
	}
	defer e.Release()
	for d, first := m.deps, true; ; d, first = d.next(), false {
		if err := m.term(ctx, d, e.Term); err != nil {
			if first {
				return err
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		klog.FromContext(ctx).Info("Lost the Lease: every controller stopped and its state dropped; standing by with fresh informers", "identity", m.opts.Identity)
	}
}

// term runs one term on d: it builds the controllers, starts and syncs
// the informers and the event recorder, and runs the controllers while
// elect (leadership.Election.Term, or at once) lets it; then it stops
// everything it started and waits for it, drops the term's metrics, and
// returns. The error says the informers never synced (ctx ended first).
func (m *Manager) term(ctx context.Context, d *Deps, elect func(context.Context, func(context.Context))) error {
	ctx, cancel := context.WithCancel(ctx)
	controllers := m.build(d)
	defer func() {
		cancel()
		m.synced.Store(false)
		d.Informers.shutdown()
		if r, ok := d.Recorder.(*recorder); ok {
			r.broadcaster.Shutdown()
		}
		d.metrics.unregisterAll()
	}()
	d.Informers.start(ctx.Done())
	if !d.Informers.synced(ctx.Done()) {
		return fmt.Errorf("informers did not sync: %w", ctx.Err())
	}
	m.synced.Store(true)
	d.StartEvents(ctx)
	if m.opts.LeaderElect {
		klog.FromContext(ctx).Info("Informers synced; campaigning for the Lease", "lease", d.Namespace+"/"+m.opts.Component, "identity", m.opts.Identity)
	}
	elect(ctx, func(ctx context.Context) { m.lead(ctx, controllers) })
	return nil
}

// lead runs every controller until ctx ends and waits for them.
func (m *Manager) lead(ctx context.Context, controllers []Controller) {
	if m.opts.LeaderElect {
		klog.FromContext(ctx).Info("Leading; starting controllers", "identity", m.opts.Identity)
		m.leading.Store(true)
		m.leaderGauge.Set(1)
		m.terms.Inc()
		defer func() {
			m.leading.Store(false)
			m.leaderGauge.Set(0)
			klog.FromContext(ctx).Info("Term over; every controller has stopped", "identity", m.opts.Identity)
		}()
	}
	var wg sync.WaitGroup
	for _, c := range controllers {
		wg.Go(func() { c.Run(ctx, m.opts.Workers) })
	}
	wg.Wait()
}

// HasSynced is a helper for controllers that wait on their own informers.
func HasSynced(ctx context.Context, name string, synced ...cache.InformerSynced) bool {
	return cache.WaitForNamedCacheSync(name, ctx.Done(), synced...)
}
