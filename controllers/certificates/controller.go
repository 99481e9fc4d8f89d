// Package certificates keeps the certificates the API server needs to call
// node-manager's Services, so that an installation needs nothing else
// (cert-manager is an option: manifests/cert-manager):
//
//   - a CA in the Secret node-manager-ca (d8-cloud-instance-manager): the
//     signing CA (tls.crt, tls.key), the bundle every consumer trusts
//     (ca.crt), and during a rotation the next CA (next.crt, next.key);
//   - a serving certificate for each Service (bashible-api for
//     bashible-apiserver, capi-webhook-service for Cluster API's webhooks)
//     in its kubernetes.io/tls Secret (bashible-api-server-tls,
//     capi-webhook-service-cert), for <service>, <service>.<namespace>,
//     <service>.<namespace>.svc and <service>.<namespace>.svc.cluster.local;
//     the servers reload them from the mounted files (k8s.io/apiserver's
//     dynamic serving certificate, controller-runtime's certwatcher);
//   - the caBundle of each client configuration that points at one of
//     those Services in every APIService, validating and mutating webhook
//     configuration and CRD (conversion webhook) labelled
//     node-manager.deckhouse.io/inject-ca-bundle=true. Other client
//     configurations, and unlabelled objects, are left alone.
//
// Certificates are renewed at two thirds of their life, CAs with a rotation
// that no client notices (Decide, in decide.go, says how); the annotation
// node-manager.deckhouse.io/renew-before on the CA Secret or a serving
// certificate's Secret forces one. Everything hangs on one key: a sync reads
// the CA Secret, the serving certificates and the consumers, decides, and
// makes at most one change to the CA Secret, or else writes the bundles and
// the serving certificates that are due; each write's event queues the
// next sync, and a timer the next change that time alone brings.
//
// It runs only with --manage-certificates (on by default and in the
// shipped Deployment; the e2e harness, which gives every process a
// certificate of the control plane's CA, turns it off).
package certificates

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "certificates"

// key is the loop's only key.
const key = "all"

// service is a Service the API server calls and the Secret of its serving
// certificate, both in the controller's namespace; Also are the other
// Services in front of the same pods, whose names the certificate carries
// too.
type service struct {
	Name, Secret string
	Also         []string
}

// services are the Services that get a serving certificate.
var services = []service{
	{Name: bashiblev1alpha1.ServiceName, Secret: deckhousev1.BashibleAPIServerTLSSecret, Also: []string{bashiblev1alpha1.ConversionServiceName}},
	{Name: infrav1alpha1.CAPIWebhookService, Secret: infrav1alpha1.CAPIWebhookSecret},
}

// dnsNames are the names svc's certificate carries in namespace.
func (svc service) dnsNames(namespace string) []string {
	names := DNSNames(svc.Name, namespace)
	for _, also := range svc.Also {
		names = append(names, DNSNames(also, namespace)...)
	}
	return names
}

// DNSNames are the names a serving certificate of Service name in
// namespace carries: the API server calls <name>.<namespace>.svc.
func DNSNames(name, namespace string) []string {
	return []string{name, name + "." + namespace, name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local"}
}

// The consumers' resources.
var (
	apiServicesResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	validatingResource  = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
	mutatingResource    = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
	crdsResource        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	consumerResources   = []schema.GroupVersionResource{apiServicesResource, validatingResource, mutatingResource, crdsResource}
)

// Controller keeps the CA, the serving certificates and the caBundles.
type Controller struct {
	d         *manager.Deps
	opts      Options
	enabled   bool
	secrets   corelisters.SecretLister
	consumers dynamicinformer.DynamicSharedInformerFactory
	listers   map[schema.GroupVersionResource]cache.GenericLister
	synced    []cache.InformerSynced
	queue     *loop.Loop
}

// New wires the controller: a change of its Secrets or of a labelled
// consumer queues the one key. Without --manage-certificates it only says
// so when it runs, and registers no informer.
func New(d *manager.Deps, opts Options) *Controller {
	c := &Controller{d: d, opts: opts, enabled: opts.Manage && d.Dynamic != nil}
	c.queue = loop.New(Name, d.Loops, c.sync)
	if !c.enabled {
		return c
	}
	all := func(any) { c.queue.Add(key) }
	handler := cache.ResourceEventHandlerFuncs{AddFunc: all, DeleteFunc: all, UpdateFunc: func(_, cur any) { all(cur) }}
	secrets := d.Informers.Namespace.Core().V1().Secrets()
	c.secrets = secrets.Lister()
	c.synced = append(c.synced, secrets.Informer().HasSynced)
	_, _ = secrets.Informer().AddEventHandler(cache.FilteringResourceEventHandler{FilterFunc: ours, Handler: handler})

	c.consumers = dynamicinformer.NewFilteredDynamicSharedInformerFactory(d.Dynamic, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = deckhousev1.InjectCABundleLabel + "=true" })
	c.listers = map[schema.GroupVersionResource]cache.GenericLister{}
	for _, r := range consumerResources {
		inf := c.consumers.ForResource(r)
		c.listers[r] = inf.Lister()
		c.synced = append(c.synced, inf.Informer().HasSynced)
		_, _ = inf.Informer().AddEventHandler(handler)
	}
	return c
}

// ours: the CA Secret and the serving certificates' Secrets.
func ours(obj any) bool {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return false
	}
	if s.Name == deckhousev1.CertificateAuthoritySecret {
		return true
	}
	for _, svc := range services {
		if s.Name == svc.Secret {
			return true
		}
	}
	return false
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it starts the consumers' informers,
// waits for the caches and works the queue (one key, one worker) until ctx
// ends.
func (c *Controller) Run(ctx context.Context, _ int) {
	if !c.enabled {
		klog.FromContext(ctx).Info("Certificate management is off (--manage-certificates=false): the serving certificates and caBundles come from elsewhere")
		return
	}
	c.consumers.Start(ctx.Done())
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Add(key)
	c.queue.Run(ctx, 1)
}
