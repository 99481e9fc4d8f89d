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
// lists the objects (metadata only: it never asks for their content) and
// writes each with an empty patch, which kube-apiserver stores at the
// storage version; then it replaces storedVersions with the storage
// version alone, with a test of the list it read, so a change meanwhile
// fails the patch and the next sync starts again. An object written
// meanwhile is already stored at the storage version.
//
// Each binary migrates the kinds it owns, and only those (New takes their
// resources): RBAC cannot tell a metadata list from a full one, so the
// right to list a kind for its migration is the right to read it, and
// SSHCredentials hold private keys that caps-controller-manager alone may
// read. node-manager-controller migrates NodeManagerControllerResources,
// caps-controller-manager CAPSControllerManagerResources; each watches
// its own CRDs by name, so its RBAC names them (manifests/*/rbac.yaml, the
// crd-migration ClusterRoles).
package crdmigration

import (
	"context"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "crd-migration"

// The deckhouse.io resources (plurals) each binary migrates: the kinds it
// owns. Every deckhouse.io CRD served at several versions is in exactly one
// of them (manifests' TestMigrationRBACIsEachBinarysOwnKinds).
var (
	// NodeManagerControllerResources: the groups, the nodes' Instances
	// and NodeUsers.
	NodeManagerControllerResources = []string{"nodegroups", "instances", "nodeusers"}
	// CAPSControllerManagerResources: the static hosts and how to log in
	// to them (the private keys), Cluster API Provider Static's.
	CAPSControllerManagerResources = []string{"sshcredentials", "staticinstances"}
)

// CRDName is the name of the deckhouse.io CRD of resource.
func CRDName(resource string) string {
	return schema.GroupResource{Group: deckhousev1.GroupName, Resource: resource}.String()
}

var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Controller migrates the stored objects of some deckhouse.io CRDs.
type Controller struct {
	d       *manager.Deps
	enabled bool
	// fieldManager is the field manager of its writes: the component's name.
	fieldManager string
	factories    []dynamicinformer.DynamicSharedInformerFactory
	// crds has a lister by CRD name, each of an informer of that one
	// CRD: the CRDs this controller migrates, and no other.
	crds   map[string]cache.GenericLister
	synced []cache.InformerSynced
	queue  *loop.Loop

	mu sync.Mutex
	// migrated is, by CRD name, the resourceVersion of the CRD this
	// process migrated from: a sync that runs before the informer has
	// seen its own status patch finds that version again, and must not
	// rewrite every object a second time.
	migrated map[string]string
}

// New wires the controller for the deckhouse.io CRDs of resources (the
// plurals of the kinds the binary owns): each is watched by name, and a
// CRD with a version to migrate from queues its name. Without dynamic and
// metadata clients (tests that build Deps from fakes) it does nothing.
func New(d *manager.Deps, resources []string) *Controller {
	c := &Controller{d: d, enabled: d.Dynamic != nil && d.Metadata != nil, fieldManager: Name, crds: map[string]cache.GenericLister{}}
	if d.Options != nil && d.Options.Component != "" {
		c.fieldManager = d.Options.Component
	}
	c.queue = loop.New(Name, d.Loops, c.sync)
	if !c.enabled {
		return c
	}
	for _, r := range resources {
		name := CRDName(r)
		// One CRD by name: RBAC can then grant list and watch by
		// resourceNames.
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(d.Dynamic, 0, "", func(o *metav1.ListOptions) {
			o.FieldSelector = "metadata.name=" + name
		})
		inf := f.ForResource(crdsResource)
		c.factories = append(c.factories, f)
		c.crds[name] = inf.Lister()
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
	}
	return c
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: one worker, one CRD at a time.
func (c *Controller) Run(ctx context.Context, _ int) {
	if !c.enabled {
		klog.FromContext(ctx).Info("The storage migration of deckhouse.io CRDs is off: no dynamic or metadata client")
		return
	}
	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
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
