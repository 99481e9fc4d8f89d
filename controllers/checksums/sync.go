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

	"github.com/node-manager/node-manager/controllers/manager"
)

// sync makes the Secret equal to the served checksums.
func (c *Controller) sync(ctx context.Context, _ string) error {
	bundles, err := c.bundles.List(labels.Everything())
	if err != nil {
		return err
	}
	want := Want(bundles)
	have, err := c.secrets.Secrets(c.d.Namespace).Get(SecretName)
	switch {
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: c.d.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": manager.Name}},
			Type: corev1.SecretTypeOpaque,
			Data: want,
		}
		if _, err := c.d.Kube.CoreV1().Secrets(c.d.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Secret %s/%s: %w", c.d.Namespace, SecretName, err)
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
		return fmt.Errorf("updating Secret %s/%s: %w", c.d.Namespace, SecretName, err)
	}
	klog.InfoS("Published configuration checksums", "groups", len(want))
	return nil
}
