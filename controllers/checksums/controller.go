// Package checksums publishes d8-cloud-instance-manager/configuration-checksums
// (<group>: <sha256>) for tools that read it the way Deckhouse's did. The
// checksums come from the served NodeGroupBundles: node-manager computes
// them in one place only, bashible-apiserver.
package checksums

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	bashiblelisters "github.com/node-manager/node-manager/generated/listers/bashible/v1alpha1"
)

const key = "all"

// Controller keeps the Secret equal to the served checksums.
type Controller struct {
	d       *manager.Deps
	bundles bashiblelisters.NodeGroupBundleLister
	secrets corelisters.SecretLister
	synced  []cache.InformerSynced
	loop    *loop.Loop
}

// New wires the controller to the shared informers.
func New(d *manager.Deps) *Controller {
	bundles := d.Informers.Bundles.Bashible().V1alpha1().NodeGroupBundles()
	secrets := d.Informers.Namespace.Core().V1().Secrets()
	c := &Controller{
		d:       d,
		bundles: bundles.Lister(),
		secrets: secrets.Lister(),
		synced:  []cache.InformerSynced{bundles.Informer().HasSynced, secrets.Informer().HasSynced},
	}
	c.loop = loop.New(c.Name(), d.Loops, c.sync)
	all := func(any) { c.loop.Add(key) }
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

// Name implements manager.Controller: the controller is named after the
// Secret it writes.
func (c *Controller) Name() string { return deckhousev1.ConfigurationChecksumsSecret }

// Run implements manager.Controller.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, c.Name(), c.synced...) {
		return
	}
	c.loop.Add(key)
	c.loop.Run(ctx, 1)
}

// Want is the Secret data for the served bundles.
func Want(bundles []*bashiblev1alpha1.NodeGroupBundle) map[string][]byte {
	want := map[string][]byte{}
	for _, b := range bundles {
		if sum := b.Annotations[bashiblev1alpha1.ChecksumAnnotation]; sum != "" {
			want[b.Name] = []byte(sum)
		}
	}
	return want
}

func (c *Controller) sync(ctx context.Context, _ string) error {
	bundles, err := c.bundles.List(labels.Everything())
	if err != nil {
		return err
	}
	want := Want(bundles)
	have, err := c.secrets.Secrets(c.d.Namespace).Get(deckhousev1.ConfigurationChecksumsSecret)
	switch {
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.ConfigurationChecksumsSecret, Namespace: c.d.Namespace,
				Labels: map[string]string{deckhousev1.ManagedByLabel: deckhousev1.NodeManagerControllerName}},
			Type: corev1.SecretTypeOpaque,
			Data: want,
		}
		if _, err := c.d.Kube.CoreV1().Secrets(c.d.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Secret %s/%s: %w", c.d.Namespace, deckhousev1.ConfigurationChecksumsSecret, err)
		}
		klog.InfoS("Published configuration checksums", "groups", len(want))
		return nil
	case err != nil:
		return err
	}
	if maps.EqualFunc(have.Data, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		return nil
	}
	s := have.DeepCopy()
	s.Data = want
	if _, err := c.d.Kube.CoreV1().Secrets(c.d.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating Secret %s/%s: %w", c.d.Namespace, deckhousev1.ConfigurationChecksumsSecret, err)
	}
	klog.InfoS("Published configuration checksums", "groups", len(want))
	return nil
}
