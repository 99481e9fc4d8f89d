package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/node-manager/node-manager/apiserver/access"
	"github.com/node-manager/node-manager/apiserver/admission"
	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/apiserver/conversion"
	"github.com/node-manager/node-manager/apiserver/preview"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	generatedopenapi "github.com/node-manager/node-manager/generated/openapi"
	"github.com/node-manager/node-manager/internal/settle"
	"github.com/node-manager/node-manager/internal/startuppages"
	"github.com/node-manager/node-manager/registry"
	"github.com/node-manager/node-manager/templates"
	"github.com/node-manager/node-manager/templates/sandbox"
)

// Config is the server's configuration: the generic server's and ours.
type Config struct {
	Generic *genericapiserver.RecommendedConfig
	Extra   ExtraConfig
}

// ExtraConfig is what bashible-apiserver adds to the generic configuration.
type ExtraConfig struct {
	TemplatesDir string
	// BundlesNamespace holds the published bundles and the leader Lease.
	BundlesNamespace string
	Identity         string
	Render           RenderConfig
	LeaderElection   LeaderElectionOptions
	// RevisionHistory is how many revisions of each group are kept.
	RevisionHistory int
}

// RenderConfig bounds rendering (see RenderOptions).
type RenderConfig struct {
	Workers      int
	Timeout      time.Duration
	WorkerMemory int64
	// WorkerIdleTimeout: 0 keeps idle workers.
	WorkerIdleTimeout time.Duration
	// WorkerBinary is the executable a render worker runs; empty: this one.
	WorkerBinary string
}

// settleAfter is how long the server waits after its last render or
// publish before it returns the heap they freed (returnFreedMemory): long
// enough that a burst of changes (a kubectl apply of many objects) is one
// burst, shorter than the render workers' default idle timeout, so that
// once they have stopped the server has returned its share too.
const settleAfter = 5 * time.Second

// returnFreedMemory returns to the operating system the heap a burst of
// renders and publishes freed (a full render of 100 groups frees tens of
// MB), at the cost of one collection per burst. The collector's background
// scavenger would return it too, but slowly: a minute after a burst the
// server still held 10 MB more than it needed.
func returnFreedMemory() {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	klog.V(2).InfoS("Returned the heap freed by renders and publishes", "returnedBytes", int64(after.HeapReleased)-int64(before.HeapReleased), "liveBytes", after.HeapAlloc)
}

// watchDrainPeriod is the longest a stopping replica takes to end its
// watches (rate limited, so that their clients do not all come back at
// once).
const watchDrainPeriod = 5 * time.Second

// CompletedConfig is a Config with every default filled in; only it can
// build a server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	extra   ExtraConfig
	client  *genericapiserver.RecommendedConfig
}

func newConfig(o *Options) (*Config, error) {
	if err := o.applyFeatureGates(); err != nil {
		return nil, err
	}
	generic := genericapiserver.NewRecommendedConfig(Codecs)
	generic.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	generic.FeatureGate = o.Generic.FeatureGate
	namer := openapi.NewDefinitionNamer(Scheme)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIConfig.Info.Title = deckhousev1.BashibleAPIServerName
	generic.OpenAPIConfig.Info.Version = bashiblev1alpha1.SchemeGroupVersion.Version
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIV3Config.Info.Title = deckhousev1.BashibleAPIServerName
	generic.OpenAPIV3Config.Info.Version = bashiblev1alpha1.SchemeGroupVersion.Version
	if err := o.Generic.ApplyTo(generic); err != nil {
		return nil, err
	}
	if generic.ClientConfig == nil {
		return nil, errors.New("no client for the cluster: pass --kubeconfig or run in a pod")
	}
	generic.ClientConfig.QPS, generic.ClientConfig.Burst = o.APIQPS, o.APIBurst
	generic.ShutdownDelayDuration = o.ShutdownDelay
	// Watches (kube-controller-manager's, node-manager-controller's) end
	// as soon as a stopping replica stops accepting requests, and their
	// clients watch again through the Service, on the other replica.
	// Without it a watch keeps the stopping replica's connection open
	// until it is killed, and its client sees a broken stream.
	generic.ShutdownWatchTerminationGracePeriod = watchDrainPeriod
	memory, err := o.workerMemory()
	if err != nil {
		return nil, err
	}
	workerBinary, err := o.renderWorkerBinary()
	if err != nil {
		return nil, err
	}
	return &Config{Generic: generic, Extra: ExtraConfig{TemplatesDir: o.TemplatesDir, BundlesNamespace: o.BundlesNamespace, Identity: o.Identity,
		Render: RenderConfig{Workers: o.Render.Workers, Timeout: o.Render.Timeout, WorkerMemory: memory, WorkerIdleTimeout: o.Render.WorkerIdleTimeout, WorkerBinary: workerBinary}, LeaderElection: o.LeaderElection,
		RevisionHistory: o.RevisionHistory}}, nil
}

// Complete fills in defaults.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.Generic.Complete(), extra: c.Extra, client: c.Generic}
}

// Server is a bashible-apiserver ready to run.
type Server struct {
	Generic    *genericapiserver.GenericAPIServer
	controller *bundles.Controller
	narrower   *access.Narrower
}

var (
	metricsOnce     sync.Once
	bundleMetrics   *bundles.Metrics
	registryMetrics *registry.Metrics
)

// processMetrics are registered once per process with the registry served
// on /metrics: the bundles' (render, publish, serve) and the requests.
func processMetrics() (*bundles.Metrics, *registry.Metrics) {
	metricsOnce.Do(func() {
		bundleMetrics, registryMetrics = bundles.NewMetrics(), registry.NewMetrics()
		legacyregistry.RawMustRegister(bundleMetrics.Collectors()...)
		legacyregistry.RawMustRegister(registryMetrics.Collectors()...)
	})
	return bundleMetrics, registryMetrics
}

// The registry reads bundles from the store and narrows reads by Instances
// and bootstrap tokens.
var (
	_ registry.BundleSource = &bundles.Store{}
	_ registry.Narrower     = &access.Narrower{}
)

// New builds the server: it loads the template tree (a broken tree is an
// error here, not at the first request), wires the bundle controller and
// installs the API group.
func (c CompletedConfig) New() (*Server, error) {
	fsys := templates.Builtin()
	if c.extra.TemplatesDir != "" {
		fsys = templates.Overlay(fsys, c.extra.TemplatesDir)
	}
	tree, err := templates.LoadTree(fsys)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(c.client.ClientConfig)
	if err != nil {
		return nil, err
	}
	nm, err := versioned.NewForConfig(c.client.ClientConfig)
	if err != nil {
		return nil, err
	}
	generic, err := c.generic.New(deckhousev1.BashibleAPIServerName, genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	// NodeGroupConfigurations are written by users: they render in worker
	// processes that cannot take the server's CPU or memory with them.
	idle := c.extra.Render.WorkerIdleTimeout
	if idle == 0 {
		idle = -1 // the flag's 0 keeps idle workers
	}
	var command func() *exec.Cmd
	if bin := c.extra.Render.WorkerBinary; bin != "" {
		command = sandbox.Command(bin)
	}
	pool, err := sandbox.New(sandbox.Config{Library: tree.Library(), Workers: c.extra.Render.Workers,
		Timeout: c.extra.Render.Timeout, Memory: c.extra.Render.WorkerMemory, IdleTimeout: idle, Command: command})
	if err != nil {
		return nil, err
	}
	if err := pool.Check(); err != nil {
		return nil, err
	}
	m, requests := processMetrics()
	store := bundles.NewStore(m.ServedChanged)
	sandboxed := tree.WithSandbox(pool)
	controller := bundles.NewController(bundles.ControllerConfig{
		Kube: kube, NodeMgr: nm, Namespace: c.extra.BundlesNamespace, Identity: c.extra.Identity,
		Renderer: bundles.NewRenderer(sandboxed), Store: store, Metrics: m, Workers: c.extra.Render.Workers, RevisionHistory: c.extra.RevisionHistory,
		LeaseDuration: c.extra.LeaderElection.LeaseDuration, RenewDeadline: c.extra.LeaderElection.RenewDeadline, RetryPeriod: c.extra.LeaderElection.RetryPeriod,
		Settle: settle.New(clock.RealClock{}, settleAfter, returnFreedMemory),
	})
	narrower := access.NewNarrower(nm)
	// Previews render proposals with the same tree and render workers;
	// nodes are counted from the narrower's Instance informer.
	previewer := preview.New(sandboxed, controller, store, preview.InstanceNodes{Lister: narrower.Instances(), Synced: narrower.HasSynced})

	group := genericapiserver.NewDefaultAPIGroupInfo(bashiblev1alpha1.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	storages := registry.Storages(store, narrower, requests)
	storages[registry.NodeGroupBundlePreviewsResource] = registry.NewNodeGroupBundlePreviews(previewer, requests)
	group.VersionedResourcesStorageMap[bashiblev1alpha1.SchemeGroupVersion.Version] = storages
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("install %s: %w", bashiblev1alpha1.GroupName, err)
	}
	generic.Handler.NonGoRestfulMux.Handle(bashiblev1alpha1.PreviewWebhookPath, admission.NewWebhook(previewer, controller))
	generic.Handler.NonGoRestfulMux.Handle(bashiblev1alpha1.EarlyOOMSettingsWebhookPath, admission.NewSettingsWebhook())
	// The CRDs' conversion webhook: kube-apiserver calls it without
	// credentials, so its path is exempt from authorization (NewOptions).
	generic.Handler.NonGoRestfulMux.Handle(bashiblev1alpha1.ConversionWebhookPath, conversion.NewWebhook())
	// Deckhouse's NodeGroup rules that read the group's nodes: the nodes
	// from the narrower's Instances, their labels from the Nodes' metadata
	// (labels only: a Node's status is never held).
	metaClient, err := metadata.NewForConfig(c.client.ClientConfig)
	if err != nil {
		return nil, err
	}
	nodeMeta := metadatainformer.NewSharedInformerFactory(metaClient, 0)
	nodeInformer := nodeMeta.ForResource(corev1.SchemeGroupVersion.WithResource("nodes"))
	if err := nodeInformer.Informer().SetTransform(nodeLabelsOnly); err != nil {
		return nil, err
	}
	groupNodes := admission.InstanceGroupNodes{Instances: narrower.Instances(),
		Nodes: func(name string) (map[string]string, bool, error) {
			obj, err := nodeInformer.Lister().Get(name)
			if apierrors.IsNotFound(err) {
				return nil, false, nil
			}
			if err != nil {
				return nil, false, err
			}
			m, ok := obj.(metav1.Object)
			if !ok {
				return nil, false, fmt.Errorf("node %s: unexpected object %T", name, obj)
			}
			return m.GetLabels(), true, nil
		},
		Synced: func() bool { return narrower.HasSynced() && nodeInformer.Informer().HasSynced() }}
	generic.Handler.NonGoRestfulMux.Handle(bashiblev1alpha1.NodeGroupPolicyWebhookPath, admission.NewPolicyWebhook(groupNodes))

	s := &Server{Generic: generic, controller: controller, narrower: narrower}
	generic.AddPostStartHookOrDie("bashible-bundles", func(hook genericapiserver.PostStartHookContext) error {
		narrower.Start(hook.Done())
		nodeMeta.Start(hook.Done())
		go func() {
			if err := controller.Run(hook.Context); err != nil {
				klog.ErrorS(err, "The bundle controller stopped")
			}
			pool.Close()
		}()
		go releaseStartupPages(hook.Context, func() bool { return narrower.HasSynced() && controller.Ready() == nil })
		return nil
	})
	if err := generic.AddReadyzChecks(healthz.NamedCheck("bashible-bundles", func(*http.Request) error {
		if !narrower.HasSynced() {
			return errors.New("the Instances that narrow nodes' reads are not loaded yet")
		}
		return controller.Ready()
	})); err != nil {
		return nil, err
	}
	return s, nil
}

// nodeLabelsOnly is the Node metadata informer's transform: the rules read
// a Node's labels, and its managed fields and annotations were most of
// what the informer held (8 MB of managed fields alone with 5,000 nodes).
func nodeLabelsOnly(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // a tombstone: its object was transformed before
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels}}, nil
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	return s.Generic.PrepareRun().RunWithContext(ctx)
}

// releaseStartupPages gives back the executable's pages that only start-up
// touched (internal/startuppages) once the server is ready: by then the
// package initialisers, the serving stack's set-up and the informers'
// first lists are done, and about half of the 60 MiB of the binary then
// resident is not used again. The unmapped pages are dropped from the
// page cache too, so that serving maps back only what it uses.
func releaseStartupPages(ctx context.Context, ready func() bool) {
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) { return ready(), nil }); err != nil {
		return
	}
	released, err := startuppages.Release(startuppages.Options{DropCache: true})
	if err != nil {
		klog.ErrorS(err, "Releasing the executable's start-up pages failed; they stay resident until the kernel reclaims them")
		return
	}
	klog.InfoS("Released the executable's pages mapped during start-up", "residentBytes", released.Resident, "regions", len(released.Regions), "droppedFromPageCache", released.DroppedCache)
}
