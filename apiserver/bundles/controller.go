package bundles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	applyv1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nminformers "github.com/node-manager/node-manager/generated/informers/externalversions"
	nmlistersv1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

// ConditionRendered is the condition set on NodeGroupConfigurations and NodeGroups.
const ConditionRendered = "Rendered"

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
	// LeaseDuration etc. tune leader election; zero means 15s/10s/2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Controller renders on every replica and, on the leader, publishes.
//
// Each node group is a work item of its own (the key is the group's
// name): a change enqueues the groups it affects (a NodeGroup itself, the
// groups a NodeGroupConfiguration selects before and after the change,
// every group for a cluster-wide input), and Workers goroutines render
// them, so a group whose templates take their whole time budget delays no
// other group. Every render enqueues the single publish item (coalesced
// while queued), which the leader runs over every group's latest result.
type Controller struct {
	cfg      ControllerConfig
	queue    workqueue.TypedRateLimitingInterface[string]
	publishQ workqueue.TypedRateLimitingInterface[string]

	factories      []interface{ Start(<-chan struct{}) }
	nodeGroups     nmlistersv1.NodeGroupLister
	configs        nmlistersv1alpha1.NodeGroupConfigurationLister
	secretsKS      corelisters.SecretLister
	configMapsKS   corelisters.ConfigMapLister
	endpointSlices discoverylisters.EndpointSliceLister
	published      corelisters.SecretLister
	synced         []cache.InformerSynced
	recorder       events.EventRecorder
	broadcaster    events.EventBroadcaster

	leading      atomic.Bool
	inputsSynced atomic.Bool
	// leaderCtx is the context of the current term as leader; publishing
	// uses it, so writes stop when leadership is lost.
	leaderCtx atomic.Pointer[context.Context]

	resultsMu sync.Mutex
	// results is every group's latest render.
	results map[string]*Result
	// dirty groups have a render queued; inflight ones, one running.
	dirty, inflight map[string]bool
	// allRendered records that every group had a result once: until then
	// the leader does not publish, so a group that has not rendered since
	// this replica started is never taken for a deleted one.
	allRendered bool
	// lastGood is each group's bundle to restore when its Secret is
	// tampered with and the current render cannot replace it.
	lastGood *lastGood
}

// publishKey is the publish queue's only item.
const publishKey = "publish"

// NewController sets up the informers; Run starts them.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	c := &Controller{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bashible-bundles"}),
		publishQ: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bashible-bundles-publish"}),
		results: map[string]*Result{}, dirty: map[string]bool{}, inflight: map[string]bool{},
		lastGood: newLastGood(),
	}
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
	apiEndpoints := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes" }))
	publishedNS := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = deckhousev1.PublishedBundleAppLabel + "=" + deckhousev1.BashibleAPIServerName
		}))
	nm := nminformers.NewSharedInformerFactory(cfg.NodeMgr, 0)
	c.factories = []interface{ Start(<-chan struct{}) }{clusterConfig, rootCA, apiEndpoints, publishedNS, nm}

	ngInf := nm.Deckhouse().V1().NodeGroups()
	ngcInf := nm.Deckhouse().V1alpha1().NodeGroupConfigurations()
	secInf := clusterConfig.Core().V1().Secrets()
	cmInf := rootCA.Core().V1().ConfigMaps()
	esInf := apiEndpoints.Discovery().V1().EndpointSlices()
	pubInf := publishedNS.Core().V1().Secrets()
	c.nodeGroups, c.configs = ngInf.Lister(), ngcInf.Lister()
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
	everyGroup := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAllGroups() },
		UpdateFunc: func(any, any) { c.enqueueAllGroups() },
		DeleteFunc: func(any) { c.enqueueAllGroups() },
	}
	for _, inf := range []cache.SharedIndexInformer{esInf.Informer(), secInf.Informer(), cmInf.Informer()} {
		_, _ = inf.AddEventHandler(everyGroup)
	}
	_, _ = pubInf.Informer().AddEventHandler(cfg.Store.Handler())
	cfg.Store.SetResourceVersionSource(pubInf.Informer().LastSyncResourceVersion)
	// A change to what is published may need correcting (someone edited or
	// deleted a Secret): the leader re-publishes.
	republish := func() { c.publishQ.Add(publishKey) }
	_, _ = pubInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { republish() },
		UpdateFunc: func(any, any) { republish() },
		DeleteFunc: func(any) { republish() },
	})

	c.secretsKS, c.configMapsKS = secInf.Lister(), cmInf.Lister()
	c.endpointSlices, c.published = esInf.Lister(), pubInf.Lister()
	c.synced = []cache.InformerSynced{ngInf.Informer().HasSynced, ngcInf.Informer().HasSynced, secInf.Informer().HasSynced,
		cmInf.Informer().HasSynced, esInf.Informer().HasSynced, pubInf.Informer().HasSynced}

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

// Leading reports whether this replica publishes.
func (c *Controller) Leading() bool { return c.leading.Load() }

func (c *Controller) enqueueGroupOf(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.enqueue(key) // cluster-scoped: the key is the name
	}
}

// enqueueSelected enqueues the groups a NodeGroupConfiguration selects.
func (c *Controller) enqueueSelected(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ngc, ok := obj.(*deckhousev1alpha1.NodeGroupConfiguration)
	if !ok {
		c.enqueueAllGroups()
		return
	}
	if slices.Contains(ngc.Spec.NodeGroups, "*") {
		c.enqueueAllGroups()
		return
	}
	for _, g := range ngc.Spec.NodeGroups {
		c.enqueue(g)
	}
}

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

// settled reports whether group's latest result reflects every change
// seen so far: no render of it is queued or running.
func (c *Controller) settled(group string) bool {
	c.resultsMu.Lock()
	defer c.resultsMu.Unlock()
	return !c.dirty[group] && !c.inflight[group]
}

func (c *Controller) renderWorker(context.Context) {
	for {
		group, quit := c.queue.Get()
		if quit {
			return
		}
		c.resultsMu.Lock()
		c.dirty[group], c.inflight[group] = false, true
		c.resultsMu.Unlock()
		err := c.renderGroup(group)
		c.resultsMu.Lock()
		delete(c.inflight, group)
		if err != nil {
			c.dirty[group] = true
		} else if !c.dirty[group] {
			delete(c.dirty, group)
		}
		c.resultsMu.Unlock()
		c.queue.Done(group)
		if err != nil {
			klog.ErrorS(err, "Rendering a node group failed; will retry", "group", group)
			c.queue.AddRateLimited(group)
			continue
		}
		c.queue.Forget(group)
	}
}

func (c *Controller) publishWorker(context.Context) {
	for {
		key, quit := c.publishQ.Get()
		if quit {
			return
		}
		err := c.publishLatest()
		c.publishQ.Done(key)
		if err != nil {
			klog.ErrorS(err, "Publishing bundles failed; will retry")
			c.publishQ.AddRateLimited(key)
			continue
		}
		c.publishQ.Forget(key)
	}
}

func (c *Controller) inputs() (Inputs, error) {
	ngs, err := c.nodeGroups.List(labels.Everything())
	if err != nil {
		return Inputs{}, err
	}
	configs, err := c.configs.List(labels.Everything())
	if err != nil {
		return Inputs{}, err
	}
	in := Inputs{NodeGroups: ngs, Configs: configs}
	if s, err := c.secretsKS.Secrets(metav1.NamespaceSystem).Get(deckhousev1.ClusterConfigurationSecret); err == nil {
		in.ClusterConfiguration = s.Data[deckhousev1.ClusterConfigurationKey]
	} else if !apierrors.IsNotFound(err) {
		return Inputs{}, err
	}
	if cm, err := c.configMapsKS.ConfigMaps(metav1.NamespaceSystem).Get(deckhousev1.RootCAConfigMap); err == nil {
		in.CA = cm.Data["ca.crt"]
	} else if !apierrors.IsNotFound(err) {
		return Inputs{}, err
	}
	endpointSlices, err := c.endpointSlices.List(labels.Everything())
	if err != nil {
		return Inputs{}, err
	}
	in.Endpoints = templates.APIServerEndpoints(endpointSlices)
	return in, nil
}

// renderGroup renders one group, records its result and enqueues a publish.
func (c *Controller) renderGroup(group string) error {
	ng, err := c.nodeGroups.Get(group)
	if apierrors.IsNotFound(err) {
		c.resultsMu.Lock()
		_, had := c.results[group]
		delete(c.results, group)
		c.resultsMu.Unlock()
		c.cfg.Renderer.Forget(group)
		c.cfg.Metrics.ForgetGroup(group)
		if had {
			c.publishQ.Add(publishKey)
		}
		return nil
	}
	if err != nil {
		return err
	}
	in, err := c.inputs()
	if err != nil {
		return err
	}
	r := c.cfg.Renderer.Render(ng, in)
	if r.Cached {
		c.cfg.Metrics.RenderCached.Inc()
	} else {
		c.cfg.Metrics.RenderDuration.WithLabelValues(r.Group).Observe(r.Duration.Seconds())
		if r.Published == nil {
			c.cfg.Metrics.RenderErrors.WithLabelValues(r.Group).Inc()
			klog.InfoS("Node group failed to render; it keeps its last good bundle", "group", r.Group, "failures", failureMessages(r.Failures))
		}
	}
	c.resultsMu.Lock()
	c.results[group] = r
	c.resultsMu.Unlock()
	// Even an unchanged result may settle a NodeGroupConfiguration whose
	// status waited for this group.
	c.publishQ.Add(publishKey)
	return nil
}

// publishLatest publishes, on the leader, every group's latest result.
func (c *Controller) publishLatest() error {
	leaderCtx := c.leaderCtx.Load()
	if !c.leading.Load() || leaderCtx == nil || (*leaderCtx).Err() != nil {
		return nil
	}
	in, err := c.inputs()
	if err != nil {
		return err
	}
	results, ready := c.latestResults(in.NodeGroups)
	if !ready {
		return nil // the last group's first render enqueues a publish
	}
	// Every bundle is published as soon as its group renders, but a
	// NodeGroupConfiguration's status is reported only once every group it
	// selects has rendered the current state: its message lists the groups
	// and what failed in each, and must not be a mix of old and new. The
	// last of those renders enqueues another publish.
	configs := make([]*deckhousev1alpha1.NodeGroupConfiguration, 0, len(in.Configs))
	for _, ngc := range in.Configs {
		if c.allSettled(ngc, in.NodeGroups) {
			configs = append(configs, ngc)
		}
	}
	in.Configs = configs
	return c.publish(*leaderCtx, in, results)
}

// allSettled reports whether every existing group ngc selects is settled.
func (c *Controller) allSettled(ngc *deckhousev1alpha1.NodeGroupConfiguration, ngs []*deckhousev1.NodeGroup) bool {
	for _, ng := range ngs {
		if (slices.Contains(ngc.Spec.NodeGroups, "*") || slices.Contains(ngc.Spec.NodeGroups, ng.Name)) && !c.settled(ng.Name) {
			return false
		}
	}
	return true
}

// latestResults are the latest results of the groups that exist, and
// whether every group has had one since this replica started (a group
// created since then may still be missing: it has nothing published yet).
func (c *Controller) latestResults(ngs []*deckhousev1.NodeGroup) (map[string]*Result, bool) {
	c.resultsMu.Lock()
	defer c.resultsMu.Unlock()
	results := make(map[string]*Result, len(ngs))
	for _, ng := range ngs {
		if r := c.results[ng.Name]; r != nil {
			results[ng.Name] = r
		}
	}
	if !c.allRendered {
		if len(results) < len(ngs) {
			return nil, false
		}
		c.allRendered = true
	}
	return results, true
}

func failureMessages(fs []templates.Failure) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Error()
	}
	return out
}

func (c *Controller) runLeaderElection(ctx context.Context) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: deckhousev1.BashibleAPIServerName},
		Client:     c.cfg.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
	}
	durations := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   durations(c.cfg.LeaseDuration, 15*time.Second),
			RenewDeadline:   durations(c.cfg.RenewDeadline, 10*time.Second),
			RetryPeriod:     durations(c.cfg.RetryPeriod, 2*time.Second),
			ReleaseOnCancel: true,
			Name:            deckhousev1.BashibleAPIServerName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					klog.InfoS("Publishing bundles as the leader", "identity", c.cfg.Identity)
					c.leaderCtx.Store(&ctx)
					c.lastGood.setLeading(true)
					c.leading.Store(true)
					c.cfg.Metrics.Leader.Set(1)
					c.publishQ.Add(publishKey)
				},
				OnStoppedLeading: func() {
					klog.InfoS("No longer the leader", "identity", c.cfg.Identity)
					c.leading.Store(false)
					c.lastGood.setLeading(false)
					c.cfg.Metrics.Leader.Set(0)
					c.cfg.Metrics.BundleTooLarge.Reset()
				},
			},
		})
	}
}

// publish writes the bundles, restores tampered ones, deletes those of
// removed groups, and reports render failures on the objects at fault.
func (c *Controller) publish(ctx context.Context, in Inputs, results map[string]*Result) error {
	var errs []error
	tooLarge := map[string]*BundleTooLargeError{}
	for _, group := range sortedGroups(results) {
		big, err := c.publishGroup(ctx, results[group])
		if err != nil {
			errs = append(errs, err)
		}
		if big != nil {
			tooLarge[group] = big
			c.cfg.Metrics.BundleTooLarge.WithLabelValues(group).Set(1)
		} else {
			c.cfg.Metrics.BundleTooLarge.WithLabelValues(group).Set(0)
		}
	}
	errs = append(errs, c.deleteRemoved(ctx, results)...)
	errs = append(errs, c.reportConfigs(ctx, in.Configs, results, tooLarge)...)
	errs = append(errs, c.reportNodeGroups(ctx, in.NodeGroups, results, tooLarge)...)
	return errors.Join(errs...)
}

// publishGroup publishes r's bundle. When there is none to publish (the
// render failed, or the bundle is too large for a Secret, which it returns)
// it writes the group's last good bundle instead: writeBundle leaves an
// intact Secret alone, so this only restores one that someone else changed
// or deleted.
func (c *Controller) publishGroup(ctx context.Context, r *Result) (*BundleTooLargeError, error) {
	var big *BundleTooLargeError
	if r.Published != nil {
		_, err := c.writeBundle(ctx, r.Published)
		if err == nil {
			good := *r.Published
			good.TemplatesDigest = c.templatesDigest(r.Published)
			c.lastGood.wrote(&good)
			return nil, nil
		}
		if !errors.As(err, &big) {
			return nil, err
		}
		klog.InfoS("Node group's bundle is too large to publish; it keeps its last good bundle", "group", r.Group,
			"encodedBytes", big.Encoded, "limit", big.Limit)
	}
	good := c.lastGood.get(r.Group)
	if good == nil {
		return big, nil
	}
	wrote, err := c.writeBundle(ctx, good)
	if err != nil {
		return big, fmt.Errorf("restore the last good bundle of group %s: %w", r.Group, err)
	}
	if wrote {
		klog.InfoS("Restored a published bundle that was changed or deleted by someone else", "group", r.Group, "checksum", good.Checksum)
	}
	return big, nil
}

func sortedGroups(results map[string]*Result) []string {
	groups := make([]string, 0, len(results))
	for g := range results {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return groups
}

// writeBundle makes p's Secret hold exactly p, and says whether it wrote.
// A bundle too large for a Secret is a *BundleTooLargeError.
func (c *Controller) writeBundle(ctx context.Context, p *Published) (bool, error) {
	name := deckhousev1.PublishedBundleSecretPrefix + p.Group
	current, err := c.published.Secrets(c.cfg.Namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	data, err := encodeSecretData(p)
	if err != nil {
		return false, err
	}
	if err := checkEncodedSize(p, data[deckhousev1.PublishedBundleKey]); err != nil {
		return false, err
	}
	digest := c.templatesDigest(p)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: c.cfg.Namespace,
			Labels:      map[string]string{deckhousev1.PublishedBundleAppLabel: deckhousev1.BashibleAPIServerName, deckhousev1.NodeGroupLabel: p.Group},
			Annotations: map[string]string{bashiblev1alpha1.ChecksumAnnotation: p.Checksum, bashiblev1alpha1.TemplatesDigestAnnotation: digest},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	// The encoding is deterministic, so equal bytes mean an equal bundle;
	// anything else (a new render, or someone's edit) is rewritten.
	if current != nil && bytes.Equal(current.Data[deckhousev1.PublishedBundleKey], data[deckhousev1.PublishedBundleKey]) && len(current.Data) == 1 &&
		maps.Equal(current.Annotations, secret.Annotations) && maps.Equal(current.Labels, secret.Labels) {
		return false, nil
	}
	secrets := c.cfg.Kube.CoreV1().Secrets(c.cfg.Namespace)
	if current != nil && (current.Type != secret.Type || ptr.Deref(current.Immutable, false)) {
		// An update cannot change these: replace the Secret.
		err := secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &current.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("replace the published Secret of group %s (type %s, immutable %t): %w", p.Group, current.Type, ptr.Deref(current.Immutable, false), err)
		}
		current = nil
	}
	if current == nil {
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: deckhousev1.BashibleAPIServerName})
		if apierrors.IsAlreadyExists(err) {
			// It exists but the informer does not see it (its label was
			// removed): take it over.
			existing, getErr := secrets.Get(ctx, name, metav1.GetOptions{})
			if getErr != nil {
				return false, fmt.Errorf("publish bundle of group %s: %w", p.Group, getErr)
			}
			current = existing
		}
	}
	if current != nil {
		secret.ResourceVersion = current.ResourceVersion
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: deckhousev1.BashibleAPIServerName})
	}
	if err != nil {
		return false, fmt.Errorf("publish bundle of group %s: %w", p.Group, err)
	}
	klog.InfoS("Published bundle", "group", p.Group, "checksum", p.Checksum, "bytes", p.Size())
	return true, nil
}

// templatesDigest is the template tree p was rendered from.
func (c *Controller) templatesDigest(p *Published) string {
	if p.TemplatesDigest != "" {
		return p.TemplatesDigest
	}
	return c.cfg.Renderer.TemplatesDigest()
}

// reportConfigs sets each NodeGroupConfiguration's Rendered condition and
// emits a Warning event when it starts failing or fails differently.
func (c *Controller) reportConfigs(ctx context.Context, configs []*deckhousev1alpha1.NodeGroupConfiguration, results map[string]*Result, tooLarge map[string]*BundleTooLargeError) []error {
	// failures[ngc][message] = groups
	failures := map[string]map[string][]string{}
	applied := map[string][]string{}
	for _, group := range sortedGroups(results) {
		r := results[group]
		for _, name := range r.Custom {
			applied[name] = append(applied[name], group)
		}
		for _, f := range r.Failures {
			if f.Custom == "" {
				continue
			}
			if failures[f.Custom] == nil {
				failures[f.Custom] = map[string][]string{}
			}
			msg := f.Err.Error()
			failures[f.Custom][msg] = append(failures[f.Custom][msg], group)
		}
	}
	var errs []error
	for _, ngc := range configs {
		cond := metav1.Condition{Type: ConditionRendered, ObservedGeneration: ngc.Generation}
		if byMsg := failures[ngc.Name]; len(byMsg) > 0 {
			var parts []string
			for _, msg := range slices.Sorted(maps.Keys(byMsg)) {
				parts = append(parts, fmt.Sprintf("node groups %s: %s", strings.Join(byMsg[msg], ", "), msg))
			}
			cond.Status, cond.Reason = metav1.ConditionFalse, "RenderFailed"
			cond.Message = truncate(strings.Join(parts, "; ")+". The node groups keep their last good bundle until this is fixed.", 4000)
		} else if big := tooLargeOf(applied[ngc.Name], tooLarge); len(big) > 0 {
			// Its step rendered, but a group it is in cannot be published:
			// it is not what those nodes run.
			parts := make([]string, len(big))
			for i, e := range big {
				parts[i] = e.Error()
			}
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonBundleTooLarge
			cond.Message = truncate(strings.Join(parts, "; ")+". The node groups keep their last good bundle until this is fixed.", 4000)
		} else if groups := applied[ngc.Name]; len(groups) > 0 {
			cond.Status, cond.Reason = metav1.ConditionTrue, "Rendered"
			var held []string
			for _, g := range groups {
				if results[g].Published == nil {
					held = append(held, g)
				}
			}
			cond.Message = "Rendered for node groups " + strings.Join(groups, ", ")
			if len(held) > 0 {
				cond.Message += fmt.Sprintf("; not served yet to node groups %s, which keep their last good bundle because something else fails to render (see their Rendered condition)", strings.Join(held, ", "))
			}
		} else {
			cond.Status, cond.Reason = metav1.ConditionTrue, "NoNodeGroups"
			cond.Message = "No node group matches spec.nodeGroups"
		}
		old := meta.FindStatusCondition(ngc.Status.Conditions, ConditionRendered)
		if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
			continue
		}
		updated := ngc.DeepCopy()
		meta.SetStatusCondition(&updated.Status.Conditions, cond)
		updated.Status.ObservedGeneration = ngc.Generation
		if _, err := c.cfg.NodeMgr.DeckhouseV1alpha1().NodeGroupConfigurations().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: deckhousev1.BashibleAPIServerName}); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("report status of NodeGroupConfiguration %s: %w", ngc.Name, err))
			}
			continue
		}
		if cond.Status == metav1.ConditionFalse && (old == nil || old.Message != cond.Message) {
			// events.k8s.io notes are limited to 1 KiB.
			c.recorder.Eventf(updated, nil, corev1.EventTypeWarning, "RenderFailed", "Render", "%s", truncate(cond.Message, 1000))
		}
	}
	return errs
}

// reportNodeGroups sets the Rendered condition on each NodeGroup with
// server-side apply, owning only that condition.
func (c *Controller) reportNodeGroups(ctx context.Context, ngs []*deckhousev1.NodeGroup, results map[string]*Result, tooLarge map[string]*BundleTooLargeError) []error {
	var errs []error
	for _, ng := range ngs {
		r := results[ng.Name]
		if r == nil {
			continue
		}
		status, reason, msg := metav1.ConditionTrue, "Rendered", "Bundle rendered"
		if current, ok := c.cfg.Store.Get(ng.Name); ok && r.Published != nil {
			msg = "Serving configuration " + current.Checksum
		}
		if r.Published == nil {
			status, reason = metav1.ConditionFalse, "RenderFailed"
			msg = truncate(strings.Join(failureMessages(r.Failures), "; ")+". The group keeps its last good bundle.", 4000)
		} else if big := tooLarge[ng.Name]; big != nil {
			status, reason = metav1.ConditionFalse, ReasonBundleTooLarge
			msg = truncate(big.Error()+". The group keeps its last good bundle.", 4000)
		}
		// observedGeneration tells a reader which spec this condition is
		// about, so a new generation is always reported.
		old := meta.FindStatusCondition(ng.Status.Conditions, ConditionRendered)
		if old != nil && old.Status == status && old.Reason == reason && old.Message == msg && old.ObservedGeneration == ng.Generation {
			continue
		}
		transition := metav1.Now()
		if old != nil && old.Status == status {
			transition = old.LastTransitionTime
		}
		ac := applyv1.NodeGroup(ng.Name).WithStatus(applyv1.NodeGroupStatus().WithConditions(
			metav1ac.Condition().WithType(ConditionRendered).WithStatus(status).WithReason(reason).
				WithMessage(msg).WithLastTransitionTime(transition).WithObservedGeneration(ng.Generation)))
		if _, err := c.cfg.NodeMgr.DeckhouseV1().NodeGroups().ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: deckhousev1.BashibleAPIServerName, Force: true}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("report status of NodeGroup %s: %w", ng.Name, err))
		}
	}
	return errs
}

// tooLargeOf are the errors of those groups whose bundle is too large.
func tooLargeOf(groups []string, tooLarge map[string]*BundleTooLargeError) []*BundleTooLargeError {
	var out []*BundleTooLargeError
	for _, g := range groups {
		if e := tooLarge[g]; e != nil {
			out = append(out, e)
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
