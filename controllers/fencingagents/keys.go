package fencingagents

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/agents/fencing-agent/gossipkey"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// syncKey keeps group's gossip keyring Secret (KeySecretName): created
// with a fresh key while the group is fenced, deleted (when ours) once it
// is not. Only node-manager-controller writes it (the admission policy
// d8-node-manager-controller-secrets); only it, the kubelets of the nodes
// running the group's agents (for the pods that mount it) and cluster
// administrators can read it.
func (c *Controller) syncKey(ctx context.Context, group string, fenced bool) error {
	name := KeySecretName(group)
	have, err := c.secrets.Secrets(c.d.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		have, err = nil, nil
	}
	if err != nil {
		return err
	}
	api := c.d.Kube.CoreV1().Secrets(c.d.Namespace)
	switch {
	case !fenced && have == nil:
		return nil
	case !fenced:
		if have.Labels[deckhousev1.ManagedByLabel] != deckhousev1.NodeManagerControllerName {
			return nil // not ours
		}
		if err := api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the gossip keyring Secret %s/%s of group %s, which has no spec.fencing: %w", c.d.Namespace, name, group, err)
		}
		klog.InfoS("Deleted the gossip keyring of a group without fencing", "group", group, "secret", name)
		return nil
	case have == nil:
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.d.Namespace, Labels: keyLabels(group),
				Annotations: map[string]string{deckhousev1.FencingGossipRotatedAtAnnotation: c.d.Clock.Now().UTC().Format(time.RFC3339)}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: gossipkey.New()},
		}
		if _, err := api.Create(ctx, s, metav1.CreateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the gossip keyring Secret %s/%s of fenced group %s: %w", c.d.Namespace, name, group, err)
		}
		klog.InfoS("Created the gossip keyring of a fenced group", "group", group, "secret", name)
		return nil
	}
	return nil
}

// keyLabels are the labels of group's keyring Secret: the same as its
// DaemonSet's, so a change of it queues the group.
func keyLabels(group string) map[string]string {
	l := selector(group)
	l[deckhousev1.ManagedByLabel] = deckhousev1.NodeManagerControllerName
	return l
}
