// Package checksums publishes d8-cloud-instance-manager/configuration-checksums
// (<group>: <sha256>) for tools that read it the way Deckhouse's did. The
// checksums come from the served NodeGroupBundles: node-manager computes
// them in one place only, bashible-apiserver.
package checksums

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	bashiblelisters "github.com/node-manager/node-manager/generated/listers/bashible/v1alpha1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = deckhousev1.ConfigurationChecksumsSecret

// key is the loop's only key: every change rewrites the one Secret.
const key = "all"

// Controller keeps the Secret equal to the served checksums.
type Controller struct {
	d       *manager.Deps
	bundles bashiblelisters.NodeGroupBundleLister
	secrets corelisters.SecretLister
	synced  []cache.InformerSynced
	queue   *loop.Loop
}

// New wires the controller to the shared informers: a changed checksum, or
// a change of the Secret, queues the one key.
func New(d *manager.Deps) *Controller {
	bundles := d.Informers.Bundles.Bashible().V1alpha1().NodeGroupBundles()
	secrets := d.Informers.Namespace.Core().V1().Secrets()
	c := &Controller{
		d:       d,
		bundles: bundles.Lister(),
		secrets: secrets.Lister(),
		synced:  []cache.InformerSynced{bundles.Informer().HasSynced, secrets.Informer().HasSynced},
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	all := func(any) { c.queue.Add(key) }
	_, _ = bundles.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: all, DeleteFunc: all,
		UpdateFunc: func(old, cur any) {
			if old.(*bashiblev1alpha1.NodeGroupBundle).Annotations[bashiblev1alpha1.ChecksumAnnotation] !=
				cur.(*bashiblev1alpha1.NodeGroupBundle).Annotations[bashiblev1alpha1.ChecksumAnnotation] {
				all(cur)
			}
		},
	})
	_, _ = secrets.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			s, ok := obj.(*corev1.Secret)
			return ok && s.Name == deckhousev1.ConfigurationChecksumsSecret
		},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: all, DeleteFunc: all, UpdateFunc: func(_, cur any) { all(cur) }},
	})
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: once the caches have synced it
// publishes the checksums, and again on every change, with one worker
// (there is one key).
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Add(key)
	c.queue.Run(ctx, 1)
}
