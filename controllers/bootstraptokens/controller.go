// Package bootstraptokens keeps each NodeGroup's bootstrap token and the
// manual-bootstrap Secret built from it.
//
// "Bootstrap" names three things in node-manager; this package keeps two:
//   - a bootstrap token (tokens.go): a kube-system/bootstrap-token-<id>
//     Secret that kube-apiserver's bootstrap-token authentication accepts,
//     labelled with its group, with which a new machine reads its group's
//     objects and asks for its kubelet certificate;
//   - the manual-bootstrap script (manual.go, manual-bootstrap.sh.tpl):
//     bootstrap.sh in d8-cloud-instance-manager/manual-bootstrap-for-<group>,
//     which an administrator runs on a new machine.
//
// The third is the first-boot script the manual-bootstrap script fetches
// and runs: the aggregated bootstrap/<group> object, rendered by
// bashible-apiserver from templates/tree/bootstrap.sh.tpl.
//
// Every NodeGroup has one current token (kube-system/bootstrap-token-<id>,
// labelled with the group): the newest one while more than 3 hours of its
// 4-hour life remain, otherwise a new one. Expired tokens, and the tokens of
// groups that no longer exist, are deleted. Every group that is not
// CloudEphemeral also gets d8-cloud-instance-manager/manual-bootstrap-for-<group>
// with bootstrap.sh (writes the CA and the current token, then fetches and
// runs bootstrap/<group>; it states the token's expiry and refuses to run
// after it), cloud-config and apiserverEndpoints. A CloudEphemeral group
// gets d8-cloud-instance-manager/bootstrap-data-for-<group> instead, the
// same script as cloud-init user data in Cluster API's form (value and
// format), which its Machines name as their bootstrap data. Either is
// rewritten only when its content changes: a new token, CA or endpoints.
//
// All time comes from the injected clock, which also wakes a group when its
// next rotation or expiry is due. All state is in the API.
package bootstraptokens

import (
	"context"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics ("bootstrap", the name dashboards know).
const Name = "bootstrap"

// Names of Kubernetes' objects this controller reads; node-manager's own
// (the manual-bootstrap Secret, its keys and annotations) are in
// apiserver/apis/deckhouse/v1/well_known.go.
const (
	// caKey holds the CA in deckhousev1.RootCAConfigMap.
	caKey = "ca.crt"
	// kubernetesService owns the EndpointSlices of the API servers.
	kubernetesService = "kubernetes"
)

// Controller keeps each group's bootstrap token and manual-bootstrap
// Secret. Its key is a group name.
type Controller struct {
	d     *manager.Deps
	queue *loop.Loop

	groups    nmlisters.NodeGroupLister
	tokens    corelisters.SecretLister // kube-system
	manual    corelisters.SecretLister // node-manager's namespace
	configMap corelisters.ConfigMapLister
	slices    discoverylisters.EndpointSliceLister
	synced    []cache.InformerSynced

	mu     sync.Mutex
	wakeup map[string]*wake
}

// New builds the controller and registers its informer handlers; call it
// before the informer factories start. A group queues itself, its tokens
// and its manual-bootstrap Secret queue it, and the CA or the API
// endpoints queue every group.
func New(d *manager.Deps) *Controller {
	groups := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	tokens := d.Informers.Tokens.Core().V1().Secrets()
	configMaps := d.Informers.KubeSystem.Core().V1().ConfigMaps()
	manual := d.Informers.Namespace.Core().V1().Secrets()
	endpointSlices := d.Informers.Default.Discovery().V1().EndpointSlices()
	c := &Controller{
		d:         d,
		groups:    groups.Lister(),
		tokens:    tokens.Lister(),
		manual:    manual.Lister(),
		configMap: configMaps.Lister(),
		slices:    endpointSlices.Lister(),
		wakeup:    map[string]*wake{},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)

	_, _ = groups.Informer().AddEventHandler(handler(func(obj any) {
		if ng, ok := obj.(*deckhousev1.NodeGroup); ok {
			c.queue.Add(ng.Name)
		}
	}))
	_, _ = tokens.Informer().AddEventHandler(handler(func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok && s.Labels[deckhousev1.TokenNodeGroupLabel] != "" {
			c.queue.Add(s.Labels[deckhousev1.TokenNodeGroupLabel])
		}
	}))
	_, _ = manual.Informer().AddEventHandler(handler(func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok {
			for _, prefix := range []string{deckhousev1.ManualBootstrapSecretPrefix, deckhousev1.BootstrapDataSecretPrefix} {
				if group, found := strings.CutPrefix(s.Name, prefix); found && group != "" {
					c.queue.Add(group)
				}
			}
		}
	}))
	// The CA and the endpoints are in every group's Secret.
	_, _ = configMaps.Informer().AddEventHandler(handler(func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == deckhousev1.RootCAConfigMap {
			c.addAll()
		}
	}))
	_, _ = endpointSlices.Informer().AddEventHandler(handler(func(obj any) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok && s.Labels[discoveryv1.LabelServiceName] == kubernetesService {
			c.addAll()
		}
	}))
	c.synced = []cache.InformerSynced{
		groups.Informer().HasSynced, tokens.Informer().HasSynced, manual.Informer().HasSynced,
		configMaps.Informer().HasSynced, endpointSlices.Informer().HasSynced,
	}
	return c
}

// handler calls add with every added, updated and deleted object (the last
// known state of a deleted one).
func handler(add func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, obj any) { add(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			add(obj)
		},
	}
}

func (c *Controller) addAll() {
	groups, err := c.groups.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ng := range groups {
		c.queue.Add(ng.Name)
	}
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for the caches, then works
// the queue until ctx ends, and cancels the pending wakeups.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	defer c.stopWakeups()
	c.queue.Run(ctx, workers)
}
