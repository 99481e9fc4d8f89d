// Package crdmigration moves the objects of node-manager's deckhouse.io
// CRDs to each CRD's storage version, and then leaves only that version in
// the CRD's status.storedVersions, as kube-storage-version-migrator does.
//
// A cluster that ran Deckhouse stored its objects at the versions that were
// the storage versions of Deckhouse's CRDs over the years (NodeGroup at
// v1alpha1 before v1 existed, SSHCredentials and StaticInstance at
// v1alpha1). Once node-manager's CRDs replace Deckhouse's, kube-apiserver
// still reads those objects (converting them through the conversion
// webhook) but lists their versions in storedVersions, so no version can
// ever be dropped from the CRD. For each deckhouse.io CRD whose
// storedVersions holds anything but its storage version, the controller
// lists the objects (metadata only: it never reads their content, which
// for SSHCredentials is a private key) and writes each with an empty
// patch, which kube-apiserver stores at the storage version; then it
// replaces storedVersions with the storage version alone, with a test of
// the list it read, so a change meanwhile fails the patch and the next
// sync starts again. An object written meanwhile is already stored at the
// storage version.
package crdmigration

import (
	"context"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "crd-migration"

var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Controller migrates the stored objects of deckhouse.io CRDs.
type Controller struct {
	d       *manager.Deps
	enabled bool
	factory dynamicinformer.DynamicSharedInformerFactory
	crds    cache.GenericLister
	synced  []cache.InformerSynced
	queue   *loop.Loop
}

// New wires the controller: a deckhouse.io CRD with a version to migrate
// from queues its name. Without dynamic and metadata clients (tests that
// build Deps from fakes) it does nothing.
func New(d *manager.Deps) *Controller {
	c := &Controller{d: d, enabled: d.Dynamic != nil && d.Metadata != nil}
	c.queue = loop.New(Name, d.Loops, c.sync)
	if !c.enabled {
		return c
	}
	c.factory = dynamicinformer.NewDynamicSharedInformerFactory(d.Dynamic, 0)
	inf := c.factory.ForResource(crdsResource)
	c.crds = inf.Lister()
	c.synced = append(c.synced, inf.Informer().HasSynced)
	_, _ = inf.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			crd, err := asCRD(obj)
			if err != nil {
				return false
			}
			_, stale := Plan(crd)
			return len(stale) > 0
		},
		Handler: c.queue.Handler(loop.ByName),
	})
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: one worker, one CRD at a time.
func (c *Controller) Run(ctx context.Context, _ int) {
	if !c.enabled {
		klog.InfoS("The storage migration of deckhouse.io CRDs is off: no dynamic or metadata client")
		return
	}
	c.factory.Start(ctx.Done())
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Run(ctx, 1)
}

func asCRD(obj any) (*apiextensionsv1.CustomResourceDefinition, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, errNotCRD
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
		return nil, err
	}
	return crd, nil
}
