package crdmigration

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// pageSize bounds one list of objects' metadata.
const pageSize = 500

// sync migrates one CRD, by name: one of those it watches, never another.
func (c *Controller) sync(ctx context.Context, name string) error {
	crds, ok := c.crds[name]
	if !ok {
		return nil
	}
	obj, err := crds.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	crd, err := asCRD(obj)
	if err != nil {
		return fmt.Errorf("CRD %s: %w", name, err)
	}
	storage, stale := Plan(crd)
	if len(stale) == 0 {
		return nil
	}
	if rv, ok := c.migratedAt(name); ok && rv == crd.ResourceVersion {
		// The cache has not seen this process's own status patch yet:
		// the objects were rewritten from this very CRD. Its next event
		// (the patch) shows nothing stale.
		return nil
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: storage, Resource: crd.Spec.Names.Plural}
	migrated, err := c.rewrite(ctx, gvr)
	if err != nil {
		return fmt.Errorf("CRD %s: rewriting its objects at %s (from %v): %w", name, storage, stale, err)
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/status/storedVersions", "value": crd.Status.StoredVersions},
		{"op": "replace", "path": "/status/storedVersions", "value": []string{storage}},
	})
	if err != nil {
		return err
	}
	if _, err := c.d.Dynamic.Resource(crdsResource).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: c.fieldManager}, "status"); err != nil {
		return fmt.Errorf("CRD %s: setting status.storedVersions to [%s] after rewriting %d objects: %w", name, storage, migrated, err)
	}
	c.rememberMigrated(name, crd.ResourceVersion)
	klog.FromContext(ctx).Info("Migrated a CRD's objects to its storage version", "crd", name, "objects", migrated, "from", stale, "to", storage)
	return nil
}

// migratedAt is the resourceVersion of the CRD name this process last
// migrated from (its status patched); false when none.
func (c *Controller) migratedAt(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rv, ok := c.migrated[name]
	return rv, ok
}

func (c *Controller) rememberMigrated(name, resourceVersion string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.migrated == nil {
		c.migrated = map[string]string{}
	}
	c.migrated[name] = resourceVersion
}

// rewrite writes every object of gvr with an empty patch, which
// kube-apiserver stores at gvr's version (the storage version), and
// returns how many it wrote. It reads and writes metadata only.
func (c *Controller) rewrite(ctx context.Context, gvr schema.GroupVersionResource) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		list, err := c.d.Metadata.Resource(gvr).List(ctx, opts)
		if err != nil {
			return n, fmt.Errorf("list: %w", err)
		}
		for _, item := range list.Items {
			res := c.d.Metadata.Resource(gvr)
			var err error
			if item.Namespace != "" {
				_, err = res.Namespace(item.Namespace).Patch(ctx, item.Name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: c.fieldManager})
			} else {
				_, err = res.Patch(ctx, item.Name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: c.fieldManager})
			}
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return n, fmt.Errorf("%s %s: %w", gvr.Resource, item.Name, err)
			}
			n++
		}
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}
