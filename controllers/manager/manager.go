// Package manager runs node-manager-controller: it builds the clients and
// shared informers, serves metrics and probes, takes the leader Lease, and
// runs every controller while it holds the Lease (or, with
// --leader-elect=false, at once: a test suite runs its controllers so).
package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nminformers "github.com/node-manager/node-manager/generated/informers/externalversions"
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
	Dynamic   dynamic.Interface
	Informers *Informers
	Nodes     *nodes.Cache
	Recorder  events.EventRecorder
	Clock     clock.Clock
	Registry  prometheus.Registerer
	Loops     *loop.Metrics
	Namespace string
	Options   *Options
}

// Controller is one controller: Run blocks until ctx ends.
type Controller interface {
	Name() string
	Run(ctx context.Context, workers int)
}

// NewDeps builds clients, informers and the event recorder.
func NewDeps(cfg *rest.Config, opts *Options, clk clock.Clock, reg prometheus.Registerer) (*Deps, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = opts.Component
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
	d := NewDepsForClients(kube, nm, opts, clk, reg)
	d.Dynamic = dyn
	return d, nil
}

// NewDepsForClients builds the rest from given clients (tests pass fakes).
func NewDepsForClients(kube kubernetes.Interface, nm versioned.Interface, opts *Options, clk clock.Clock, reg prometheus.Registerer) *Deps {
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
	cache := nodes.NewCache(nodeInformer.Lister(), clk)
	_, _ = nodeInformer.Informer().AddEventHandler(nodes.CacheHandler(cache))
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	return &Deps{
		Kube:        kube,
		NodeManager: nm,
		Informers:   inf,
		Nodes:       cache,
		Recorder:    &recorder{EventRecorder: broadcaster.NewRecorder(eventScheme(), opts.Component), broadcaster: broadcaster},
		Clock:       clk,
		Registry:    reg,
		Loops:       loop.NewMetrics(reg),
		Namespace:   opts.Namespace,
		Options:     opts,
	}
}

// Manager runs controllers: under leader election, or without it when
// Options.LeaderElect is off.
type Manager struct {
	deps        *Deps
	opts        *Options
	controllers []Controller
	synced      atomic.Bool
	leading     atomic.Bool
	leaderLost  atomic.Bool
	leaderGauge prometheus.Gauge
}

// New makes a manager for the given controllers, built from deps.
func New(deps *Deps, opts *Options, controllers ...Controller) *Manager {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "node_manager_leader",
		Help: "1 while this process holds the node-manager-controller Lease and runs the controllers.",
	})
	deps.Registry.MustRegister(g)
	return &Manager{deps: deps, opts: opts, controllers: controllers, leaderGauge: g}
}

// Leading reports whether this process holds the Lease.
func (m *Manager) Leading() bool { return m.leading.Load() }

// Handler serves /metrics, /healthz and /readyz. /readyz is true once the
// informers have synced; /healthz fails once leadership was lost (the
// process is about to exit and must not be considered healthy).
func (m *Manager) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if m.leaderLost.Load() {
			http.Error(w, "leadership lost; restarting", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.synced.Load() {
			http.Error(w, "informers have not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// Run starts the informers, waits for them and starts recording events;
// then it campaigns for the Lease and runs the controllers while leading,
// or, with Options.LeaderElect off, runs them at once. It returns when ctx
// ends, or with an error when leadership is lost (the caller exits; a
// restart starts clean).
func (m *Manager) Run(ctx context.Context) error {
	m.deps.Informers.start(ctx.Done())
	if !m.deps.Informers.synced(ctx.Done()) {
		return fmt.Errorf("informers did not sync: %w", ctx.Err())
	}
	m.synced.Store(true)
	if r, ok := m.deps.Recorder.(*recorder); ok {
		r.broadcaster.StartRecordingToSink(ctx.Done())
		defer r.broadcaster.Shutdown()
	}
	if !m.opts.LeaderElect {
		klog.InfoS("Informers synced; running the controllers without the Lease (--leader-elect=false)")
		var wg sync.WaitGroup
		m.start(ctx, &wg)
		wg.Wait()
		return nil
	}
	klog.InfoS("Informers synced; campaigning for the Lease", "lease", m.deps.Namespace+"/"+m.opts.Component, "identity", m.opts.Identity)
	return m.lead(ctx)
}

// start runs every controller in wg until ctx ends.
func (m *Manager) start(ctx context.Context, wg *sync.WaitGroup) {
	for _, c := range m.controllers {
		wg.Go(func() { c.Run(ctx, m.opts.Workers) })
	}
}

// lead runs the controllers while this process holds the Lease.
func (m *Manager) lead(ctx context.Context) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: m.deps.Namespace, Name: m.opts.Component},
		Client:     m.deps.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: m.opts.Identity},
	}
	var wg sync.WaitGroup
	leCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	leaderelection.RunOrDie(leCtx, leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: m.opts.LeaseDuration,
		RenewDeadline: m.opts.RenewDeadline,
		RetryPeriod:   m.opts.RetryPeriod,
		Name:          m.opts.Component,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.InfoS("Leading; starting controllers", "identity", m.opts.Identity)
				m.leading.Store(true)
				m.leaderGauge.Set(1)
				m.start(ctx, &wg)
			},
			OnStoppedLeading: func() {
				m.leading.Store(false)
				m.leaderGauge.Set(0)
				if ctx.Err() == nil {
					m.leaderLost.Store(true)
				}
				cancel()
			},
		},
	})
	wg.Wait()
	handOver(lock, m.opts.RenewDeadline)
	if m.leaderLost.Load() {
		return errors.New("lost the leader Lease; exiting so that a restart begins from fresh state")
	}
	return nil
}

// handOver empties the Lease's holder, so that the standby takes over at
// once, only if this process holds it now (the update carries the read's
// resourceVersion). client-go's ReleaseOnCancel is not used: it releases
// after a lost term too, judging by the record it last saw rather than the
// Lease it has just read, and so would wipe the record of a standby that
// took the Lease while this process was cut off.
func handOver(lock resourcelock.Interface, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	held, _, err := lock.Get(ctx)
	if err != nil || held.HolderIdentity != lock.Identity() {
		return
	}
	at := metav1.NewTime(time.Now())
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaderTransitions: held.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: at, AcquireTime: at}); err != nil {
		klog.ErrorS(err, "Handing the leader Lease over failed; the standby takes it when it expires")
	}
}

// NewRegistry is a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// LoadConfig reads a kubeconfig, or the in-cluster configuration when path is empty.
func LoadConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// HasSynced is a helper for controllers that wait on their own informers.
func HasSynced(ctx context.Context, name string, synced ...cache.InformerSynced) bool {
	return cache.WaitForNamedCacheSync(name, ctx.Done(), synced...)
}
