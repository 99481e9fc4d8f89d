package bundles

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nminformers "github.com/node-manager/node-manager/generated/informers/externalversions"
	nmlistersv1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/internal/leadership"
	"github.com/node-manager/node-manager/internal/settle"
)

// Where the inputs live.
const (
	// ConditionRendered is the condition set on NodeGroupConfigurations and NodeGroups.
	ConditionRendered = "Rendered"
)

// ControllerConfig wires a Controller.
type ControllerConfig struct {
	Kube    kubernetes.Interface
	NodeMgr versioned.Interface
	// Namespace holds the published bundles and the leader Lease; only
	// bashible-apiserver may write there (deckhousev1.BundlesNamespace by default).
	Namespace string
	// Identity names this replica in the leader Lease.
	Identity string
	Renderer *Renderer
	Store    *Store
	Metrics  *Metrics
	// Workers is how many groups render at once; zero means 2.
	Workers int
	// RevisionHistory is how many revisions of each group's bundle are
	// kept for pinning and rollback; zero means DefaultRevisionHistory.
	RevisionHistory int
	// LeaseDuration etc. tune leader election; zero means 15s/10s/2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Settle, when set, is told each time a render or a publish pass ends.
	Settle *settle.Settler
}

// Controller renders every node group on every replica and, on the leader,
// publishes the bundles and reports their status; the package
// documentation tells the flow and why it is shaped so.
type Controller struct {
	cfg ControllerConfig
	// queue is the render queue, keyed by group name, which cfg.Workers
	// goroutines drain; publishQ holds the single item publishKey.
	queue    workqueue.TypedRateLimitingInterface[string]
	publishQ workqueue.TypedRateLimitingInterface[string]

	factories      []interface{ Start(<-chan struct{}) }
	nodeGroups     nmlistersv1.NodeGroupLister
	configs        nmlistersv1alpha1.NodeGroupConfigurationLister
	nodeUsers      nmlistersv1.NodeUserLister
	secretsKS      corelisters.SecretLister
	staticConfigKS corelisters.SecretLister
	configMapsKS   corelisters.ConfigMapLister
	endpointSlices discoverylisters.EndpointSliceLister
	published      corelisters.SecretLister
	// contextSecrets holds the Secret deckhousev1.ContextSecret only.
	contextSecrets corelisters.SecretLister
	synced         []cache.InformerSynced
	recorder       events.EventRecorder
	broadcaster    events.EventBroadcaster

	leading      atomic.Bool
	inputsSynced atomic.Bool
	// leaderCtx is the context of the current term as leader; publishing
	// uses it, so writes stop when leadership is lost.
	leaderCtx atomic.Pointer[context.Context]
	// term is the Lease's lock, which bounds each write to the term.
	term *termLock

	resultsMu sync.Mutex
	// results is every group's latest render; renderedFrom, the version of
	// every NodeGroupConfiguration that render read.
	results      map[string]*Result
	renderedFrom map[string]map[string]configVersion
	// dirty groups have a render queued; inflight ones, one running.
	dirty, inflight map[string]bool
	// allRendered records that every group had a result once: until then
	// the leader does not publish, so a group that has not rendered since
	// this replica started is never taken for a deleted one.
	allRendered bool
	// lastGood is each group's bundle to restore when its Secret is
	// tampered with and the current render cannot replace it.
	lastGood *lastGood
	// revisions keeps each group's last bundles, for pins.
	revisions *revisions
	// contextDoc is the last render context document (writeContext);
	// encoded, each group's last encoded bundle (writeBundle).
	contextDoc contextMemo
	encoded    map[string]*encodedBundle
	// own are the leader's writes its informers do not show yet.
	own *ownWrites
}

// NewController sets up the informers; Run starts them.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = 10 * time.Second
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	c := &Controller{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bashible-bundles"}),
		publishQ: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bashible-bundles-publish"}),
		results: map[string]*Result{}, renderedFrom: map[string]map[string]configVersion{}, dirty: map[string]bool{}, inflight: map[string]bool{},
		lastGood:  newLastGood(),
		encoded:   map[string]*encodedBundle{},
		revisions: newRevisions(cfg.Kube, cfg.Namespace, cfg.RevisionHistory),
	}
	// A wait for the informer to show a write ends with another publish.
	c.own = newOwnWrites(func(after time.Duration) { c.publishQ.AddAfter(publishKey, after) })
	c.term = newTermLock(leadership.LeaseLock(cfg.Kube.CoordinationV1(), cfg.Namespace, deckhousev1.BashibleAPIServerName, cfg.Identity),
		cfg.RenewDeadline, time.Now)
	cfg.Store.OnChange(func(old, cur *Published) {
		// A follower sees the leader delete a removed group's bundle; a
		// bundle deleted while its group still exists was tampered with,
		// and its last good copy is what the next leader restores.
		if cur == nil && old != nil && c.nodeGroups != nil {
			if _, err := c.nodeGroups.Get(old.Group); err == nil {
				return
			}
		}
		c.lastGood.observed(old, cur)
	})
	// Each input is watched as narrowly as the API allows, so unrelated
	// objects never trigger a render.
	named := func(name string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(metav1.NamespaceSystem),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))
	}
	clusterConfig, rootCA := named(deckhousev1.ClusterConfigurationSecret), named(deckhousev1.RootCAConfigMap)
	staticConfig := named(deckhousev1.StaticClusterConfigurationSecret)
	apiEndpoints := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes" }))
	publishedNS := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = deckhousev1.PublishedBundleAppLabel + "=" + deckhousev1.BashibleAPIServerName
		}), informers.WithTransform(cfg.Store.Transform))
	contextNS := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(deckhousev1.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", deckhousev1.ContextSecret).String()
		}))
	nm := nminformers.NewSharedInformerFactory(cfg.NodeMgr, 0)
	c.factories = []interface{ Start(<-chan struct{}) }{clusterConfig, staticConfig, rootCA, apiEndpoints, publishedNS, contextNS, nm}

	ngInf := nm.Deckhouse().V1().NodeGroups()
	ngcInf := nm.Deckhouse().V1alpha1().NodeGroupConfigurations()
	nuInf := nm.Deckhouse().V1().NodeUsers()
	secInf := clusterConfig.Core().V1().Secrets()
	staticInf := staticConfig.Core().V1().Secrets()
	cmInf := rootCA.Core().V1().ConfigMaps()
	esInf := apiEndpoints.Discovery().V1().EndpointSlices()
	pubInf := publishedNS.Core().V1().Secrets()
	ctxInf := contextNS.Core().V1().Secrets()
	c.nodeGroups, c.configs, c.nodeUsers = ngInf.Lister(), ngcInf.Lister(), nuInf.Lister()
	_, _ = ngInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueGroupOf,
		UpdateFunc: func(_, obj any) { c.enqueueGroupOf(obj) },
		DeleteFunc: c.enqueueGroupOf,
	})
	_, _ = ngcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueSelected,
		UpdateFunc: func(old, obj any) { c.enqueueSelected(old); c.enqueueSelected(obj) },
		DeleteFunc: c.enqueueSelected,
	})
	// A NodeUser's status (written from the nodes) changes no bundle: only
	// a new generation (its spec) or its coming and going does.
	_, _ = nuInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueSelected,
		UpdateFunc: func(old, obj any) {
			o, okOld := old.(*deckhousev1.NodeUser)
			n, okNew := obj.(*deckhousev1.NodeUser)
			if okOld && okNew && o.Generation == n.Generation {
				return
			}
			c.enqueueSelected(old)
			c.enqueueSelected(obj)
		},
		DeleteFunc: c.enqueueSelected,
	})
	everyGroup := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAllGroups() },
		UpdateFunc: func(any, any) { c.enqueueAllGroups() },
		DeleteFunc: func(any) { c.enqueueAllGroups() },
	}
	for _, inf := range []cache.SharedIndexInformer{esInf.Informer(), secInf.Informer(), staticInf.Informer(), cmInf.Informer()} {
		_, _ = inf.AddEventHandler(everyGroup)
	}
	// The Store counts as loaded only once its own handler has received the
	// initial list, not merely the informer's cache: otherwise a restarted
	// replica could mark an empty Store synced and serve 404s for groups
	// that have bundles.
	storeLoaded, err := pubInf.Informer().AddEventHandler(cfg.Store.Handler())
	cfg.Store.SetResourceVersionSource(pubInf.Informer().LastSyncResourceVersion)
	// A change to what is published may need correcting (someone edited or
	// deleted a Secret): the leader re-publishes.
	// The render context Secret likewise, which the leader keeps current.
	// What shows the leader's own write ends its wait (ownWrites).
	republish := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok {
			c.own.observed(s)
		}
		c.publishQ.Add(publishKey)
	}
	for _, inf := range []cache.SharedIndexInformer{pubInf.Informer(), ctxInf.Informer()} {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    republish,
			UpdateFunc: func(_, cur any) { republish(cur) },
			DeleteFunc: republish,
		})
	}

	c.secretsKS, c.staticConfigKS, c.configMapsKS = secInf.Lister(), staticInf.Lister(), cmInf.Lister()
	c.endpointSlices, c.published, c.contextSecrets = esInf.Lister(), pubInf.Lister(), ctxInf.Lister()
	c.synced = []cache.InformerSynced{ngInf.Informer().HasSynced, ngcInf.Informer().HasSynced, nuInf.Informer().HasSynced, secInf.Informer().HasSynced, staticInf.Informer().HasSynced,
		cmInf.Informer().HasSynced, esInf.Informer().HasSynced, pubInf.Informer().HasSynced, ctxInf.Informer().HasSynced}
	if err == nil {
		c.synced = append(c.synced, storeLoaded.HasSynced)
	}

	scheme := runtime.NewScheme()
	_ = deckhousev1.AddToScheme(scheme)
	_ = deckhousev1alpha1.AddToScheme(scheme)
	c.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: cfg.Kube.EventsV1()})
	c.recorder = c.broadcaster.NewRecorder(scheme, deckhousev1.BashibleAPIServerName)
	return c
}

// Run starts the informers, waits for them, then renders on every change and
// takes part in leader election until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	defer c.publishQ.ShutDown()
	c.broadcaster.StartRecordingToSink(ctx.Done())
	defer c.broadcaster.Shutdown()
	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForNamedCacheSync("bashible-bundles", ctx.Done(), c.synced...) {
		return errors.New("informers did not sync before shutdown")
	}
	c.cfg.Store.MarkSynced()
	c.inputsSynced.Store(true)
	go c.runLeaderElection(ctx)
	for range c.cfg.Workers {
		go wait.UntilWithContext(ctx, c.renderWorker, time.Second)
	}
	go wait.UntilWithContext(ctx, c.publishWorker, time.Second)
	c.enqueueAllGroups()
	<-ctx.Done()
	return nil
}

// Ready reports whether this replica can serve: the published bundles,
// which are what it serves, are loaded and its inputs are synced. It does
// not wait for a render: a replica serves the published bundles whatever
// its own renders do, so a template that takes its whole time budget
// delays no replica's readiness.
func (c *Controller) Ready() error {
	if !c.cfg.Store.Synced() {
		return errors.New("published bundles not loaded yet")
	}
	if !c.inputsSynced.Load() {
		return errors.New("inputs (node groups, configurations, cluster settings) not loaded yet")
	}
	return nil
}

// enqueueGroupOf enqueues a NodeGroup's own group.
func (c *Controller) enqueueGroupOf(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.enqueue(key) // cluster-scoped: the key is the name
	}
}

// enqueueSelected enqueues the groups a NodeGroupConfiguration or a
// NodeUser selects (a NodeUser without nodeGroups selects every group).
func (c *Controller) enqueueSelected(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	var selected []string
	switch o := obj.(type) {
	case *deckhousev1alpha1.NodeGroupConfiguration:
		selected = o.Spec.NodeGroups
	case *deckhousev1.NodeUser:
		if selected = o.Spec.NodeGroups; len(selected) == 0 {
			selected = []string{"*"}
		}
	default:
		c.enqueueAllGroups()
		return
	}
	if slices.Contains(selected, "*") {
		c.enqueueAllGroups()
		return
	}
	for _, g := range selected {
		c.enqueue(g)
	}
}

// enqueueAllGroups enqueues every group the informer shows: at start, for a
// change to a cluster-wide input, and for a NodeGroupConfiguration that
// selects every group.
func (c *Controller) enqueueAllGroups() {
	ngs, err := c.nodeGroups.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "List node groups to re-render")
		return
	}
	for _, ng := range ngs {
		c.enqueue(ng.Name)
	}
}

// enqueue queues a group's render and marks it unsettled until then.
func (c *Controller) enqueue(group string) {
	c.resultsMu.Lock()
	c.dirty[group] = true
	c.resultsMu.Unlock()
	c.queue.Add(group)
}
