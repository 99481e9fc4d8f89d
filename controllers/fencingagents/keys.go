package fencingagents

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
		klog.FromContext(ctx).Info("Deleted the gossip keyring of a group without fencing", "group", group, "secret", name)
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
		klog.FromContext(ctx).Info("Created the gossip keyring of a fenced group", "group", group, "secret", name)
		return nil
	case have.Labels[deckhousev1.ManagedByLabel] != deckhousev1.NodeManagerControllerName:
		return nil // made by a person: not rotated here
	}
	return c.rotate(ctx, group, have)
}

// rotate takes the next step of a rotation of group's keyring, through
// the two-key keyring, so that no two agents ever lack a common key:
//
//	{primary: K}                 → {primary: K, next: N}       (due, or asked for)
//	{primary: K, next: N}        → {primary: N, previous: K}   (every agent holds N)
//	{primary: N, previous: K}    → {primary: N}                (every agent encrypts with N)
//
// "Every agent" is every Ready Node of the group that carries the
// fencing-enabled label (an armed agent): each reports the fingerprint of
// the keyring it uses in FencingGossipKeyringAnnotation on its Node, and a
// step waits until all report the Secret's current one. A node that is not
// Ready cannot receive the Secret (its kubelet does not sync) and does not
// hold the rotation up; its agent catches up when its kubelet does.
func (c *Controller) rotate(ctx context.Context, group string, s *corev1.Secret) error {
	keys, err := gossipkey.FromData(s.Data)
	if err != nil {
		klog.FromContext(ctx).Error(err, "The gossip keyring Secret of a fenced group is malformed; its agents do not gossip until it is fixed (delete it to have a new key made)",
			"group", group, "secret", s.Name)
		return nil
	}
	now := c.d.Clock.Now()
	upd := s.DeepCopy()
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	var step string
	switch {
	case s.Data[deckhousev1.FencingGossipKeyNext] != nil || s.Data[deckhousev1.FencingGossipKeyPrevious] != nil:
		waiting, err := c.agentsWithout(group, keys.Fingerprint())
		if err != nil {
			return err
		}
		if len(waiting) > 0 {
			klog.FromContext(ctx).V(2).Info("Gossip key rotation waits for agents to hold the current keyring", "group", group, "keyring", keys.Fingerprint(), "waiting", waiting)
			return nil // a Node's annotation change queues the group
		}
		if next := s.Data[deckhousev1.FencingGossipKeyNext]; next != nil {
			upd.Data = map[string][]byte{deckhousev1.FencingGossipKeyPrimary: next, deckhousev1.FencingGossipKeyPrevious: keys.Primary}
			step = "switched to the new primary key"
		} else {
			upd.Data = map[string][]byte{deckhousev1.FencingGossipKeyPrimary: keys.Primary}
			upd.Annotations[deckhousev1.FencingGossipRotatedAtAnnotation] = now.UTC().Format(time.RFC3339)
			step = "removed the previous key"
		}
	default:
		_, asked := s.Annotations[deckhousev1.FencingGossipRotateAnnotation]
		period := c.opts.GossipKeyRotationPeriod
		rotatedAt, perr := time.Parse(time.RFC3339, s.Annotations[deckhousev1.FencingGossipRotatedAtAnnotation])
		due := period > 0 && (perr != nil || now.Sub(rotatedAt) >= period)
		if !asked && !due {
			if period > 0 {
				c.queue.AddAfter(group, rotatedAt.Add(period).Sub(now))
			}
			return nil
		}
		upd.Data = map[string][]byte{deckhousev1.FencingGossipKeyPrimary: keys.Primary, deckhousev1.FencingGossipKeyNext: gossipkey.New()}
		delete(upd.Annotations, deckhousev1.FencingGossipRotateAnnotation)
		step = "handed out the next key"
	}
	if _, err := c.d.Kube.CoreV1().Secrets(c.d.Namespace).Update(ctx, upd, metav1.UpdateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
		return fmt.Errorf("rotating the gossip keyring Secret %s/%s of group %s (%s): %w", c.d.Namespace, s.Name, group, step, err)
	}
	next, _ := gossipkey.FromData(upd.Data)
	klog.FromContext(ctx).Info("Gossip key rotation", "group", group, "step", step, "keyring", next.Fingerprint())
	return nil
}

// agentsWithout lists the armed, Ready Nodes of group whose agent does not
// report keyring fingerprint fp. The group's Nodes are those its DaemonSet
// selects (NodeSelector), the ones that run its agents and hold its key:
// a node that labelled itself into the group holds neither and is not
// waited for.
func (c *Controller) agentsWithout(group, fp string) ([]string, error) {
	nodes, err := c.nodes.List(labels.SelectorFromSet(NodeSelector(group)))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		if _, armed := n.Labels[deckhousev1.FencingEnabledLabel]; !armed || !ready(n) {
			continue
		}
		if n.Annotations[deckhousev1.FencingGossipKeyringAnnotation] != fp {
			out = append(out, n.Name)
		}
	}
	return out, nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// keyLabels are the labels of group's keyring Secret: the same as its
// DaemonSet's, so a change of it queues the group.
func keyLabels(group string) map[string]string {
	l := selector(group)
	l[deckhousev1.ManagedByLabel] = deckhousev1.NodeManagerControllerName
	return l
}
