package checksums

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// sync makes the Secret equal to the served checksums.
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
		klog.FromContext(ctx).Info("Published configuration checksums", "groups", len(want))
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
	klog.FromContext(ctx).Info("Published configuration checksums", "groups", len(want))
	return nil
}
