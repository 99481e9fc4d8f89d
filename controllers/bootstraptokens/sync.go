package bootstraptokens

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/templates"
)

// sync brings one group's tokens and manual-bootstrap Secret up to date.
func (c *Controller) sync(ctx context.Context, group string) error {
	ng, err := c.groups.Get(group)
	if apierrors.IsNotFound(err) {
		c.schedule(group, time.Time{})
		return c.cleanup(ctx, group)
	}
	if err != nil {
		return err
	}
	now := c.d.Clock.Now()
	current, next, err := c.syncTokens(ctx, ng, now)
	if err != nil {
		return err
	}
	c.schedule(group, next)
	if ng.Spec.NodeType == deckhousev1.NodeTypeCloudEphemeral {
		// Machines of such groups are ordered through Cluster API, whose
		// infrastructure provider gives each its bootstrap data as
		// cloud-init user data; nobody bootstraps them by hand.
		return errors.Join(c.deleteSecret(ctx, group, SecretName(group)), c.syncSecret(ctx, ng, current, bootstrapData))
	}
	return errors.Join(c.deleteSecret(ctx, group, BootstrapDataSecretName(group)), c.syncSecret(ctx, ng, current, manualBootstrap))
}

// groupTokens lists the group's token Secrets from the cache.
func (c *Controller) groupTokens(group string) ([]*corev1.Secret, error) {
	return c.tokens.Secrets(metav1.NamespaceSystem).List(labels.SelectorFromSet(labels.Set{deckhousev1.TokenNodeGroupLabel: group}))
}

// syncTokens deletes the group's expired tokens and returns its current
// token, creating one when no token has more than MinValidity left. next
// is when the group must be looked at again: the current token's rotation
// point or the earliest expiry of another token, whichever is first.
func (c *Controller) syncTokens(ctx context.Context, ng *deckhousev1.NodeGroup, now time.Time) (Token, time.Time, error) {
	secrets, err := c.groupTokens(ng.Name)
	if err != nil {
		return Token{}, time.Time{}, err
	}
	live, err := c.liveTokens(ctx, ng.Name, now, secrets)
	if err != nil {
		return Token{}, time.Time{}, err
	}
	current, ok := newest(live, now)
	if !ok {
		// The cache may not show a token this controller has just created:
		// ask the API before creating another.
		list, err := c.d.Kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(labels.Set{deckhousev1.TokenNodeGroupLabel: ng.Name}).String(),
		})
		if err != nil {
			return Token{}, time.Time{}, fmt.Errorf("list the bootstrap tokens of group %s: %w", ng.Name, err)
		}
		fresh := make([]*corev1.Secret, 0, len(list.Items))
		for i := range list.Items {
			fresh = append(fresh, &list.Items[i])
		}
		if live, err = c.liveTokens(ctx, ng.Name, now, fresh); err != nil {
			return Token{}, time.Time{}, err
		}
		if current, ok = newest(live, now); !ok {
			if current, err = c.issue(ctx, ng, now); err != nil {
				return Token{}, time.Time{}, err
			}
			live = append(live, current)
		}
	}
	next := current.Expires.Add(-MinValidity)
	for _, t := range live {
		if t.Expires.Before(next) {
			next = t.Expires
		}
	}
	return current, next, nil
}

// liveTokens deletes the expired tokens among secrets and returns the rest.
// A labelled Secret that is not a well-formed expiring token is left alone
// and never used.
func (c *Controller) liveTokens(ctx context.Context, group string, now time.Time, secrets []*corev1.Secret) ([]Token, error) {
	var live []Token
	var errs []error
	for _, s := range secrets {
		if s.DeletionTimestamp != nil {
			continue
		}
		t, err := parseToken(s)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Ignoring a Secret labelled with a node group that is not a usable bootstrap token",
				"secret", klog.KObj(s), "group", group, "reason", err.Error())
			continue
		}
		if now.Before(t.Expires) {
			live = append(live, t)
			continue
		}
		if err := c.deleteToken(ctx, t.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).Info("Deleted an expired bootstrap token", "group", group, "token", t.ID, "expired", t.Expires)
	}
	return live, errors.Join(errs...)
}

// newest is the token that expires last, if more than MinValidity of it remains.
func newest(tokens []Token, now time.Time) (Token, bool) {
	if len(tokens) == 0 {
		return Token{}, false
	}
	t := slices.MaxFunc(tokens, func(a, b Token) int {
		if c := a.Expires.Compare(b.Expires); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return t, t.Expires.Sub(now) > MinValidity
}

// issue creates a new token for the group.
func (c *Controller) issue(ctx context.Context, ng *deckhousev1.NodeGroup, now time.Time) (Token, error) {
	t, err := newToken(now, TokenTTL)
	if err != nil {
		return Token{}, err
	}
	if _, err := c.d.Kube.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, t.secret(ng.Name),
		metav1.CreateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
		return Token{}, fmt.Errorf("create a bootstrap token for group %s: %w", ng.Name, err)
	}
	expires := t.Expires.Format(time.RFC3339)
	klog.FromContext(ctx).Info("Issued a bootstrap token", "group", ng.Name, "token", t.ID, "expires", expires)
	c.d.Recorder.Eventf(ng, nil, corev1.EventTypeNormal, "BootstrapTokenIssued", "IssueBootstrapToken",
		"issued bootstrap token %s (Secret kube-system/%s), valid until %s", t.ID, t.Name, expires)
	return t, nil
}

func (c *Controller) deleteToken(ctx context.Context, name string) error {
	err := c.d.Kube.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete bootstrap token Secret kube-system/%s: %w", name, err)
	}
	return nil
}

// cleanup removes what a deleted group leaves: its tokens and its
// manual-bootstrap Secret.
func (c *Controller) cleanup(ctx context.Context, group string) error {
	secrets, err := c.groupTokens(group)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range secrets {
		if s.Type != corev1.SecretTypeBootstrapToken || s.DeletionTimestamp != nil {
			continue
		}
		if err := c.deleteToken(ctx, s.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).Info("Deleted the bootstrap token of a deleted node group", "group", group, "secret", s.Name)
	}
	errs = append(errs, c.deleteSecret(ctx, group, SecretName(group)), c.deleteSecret(ctx, group, BootstrapDataSecretName(group)))
	return errors.Join(errs...)
}

// deleteSecret deletes a group's manual-bootstrap or bootstrap-data Secret
// name if there is one.
func (c *Controller) deleteSecret(ctx context.Context, group, name string) error {
	s, err := c.manual.Secrets(c.d.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if s.Labels[deckhousev1.TokenNodeGroupLabel] != group || s.Labels[deckhousev1.HeritageLabel] != deckhousev1.HeritageNodeManager {
		return nil // not one this controller wrote for the group
	}
	err = c.d.Kube.CoreV1().Secrets(c.d.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s/%s: %w", c.d.Namespace, name, err)
	}
	klog.FromContext(ctx).Info("Deleted a bootstrap Secret the group no longer has", "group", group, "secret", klog.KRef(c.d.Namespace, name))
	return nil
}

// secretKind is one of the two Secrets a group's token goes into: its
// name, what it is called in logs, and its data.
type secretKind struct {
	name func(group string) string
	what string
	data func(Manual) (map[string][]byte, error)
}

var (
	manualBootstrap = secretKind{name: SecretName, what: "manual-bootstrap Secret", data: Manual.Data}
	bootstrapData   = secretKind{name: BootstrapDataSecretName, what: "bootstrap-data Secret", data: Manual.BootstrapData}
)

// syncSecret writes the group's Secret of kind when its content changed.
func (c *Controller) syncSecret(ctx context.Context, ng *deckhousev1.NodeGroup, token Token, kind secretKind) error {
	ca, endpoints, missing := c.clusterAccess()
	if missing != "" {
		// The informers bring the group back once the CA or the endpoints appear.
		klog.FromContext(ctx).Info("Not writing the group's "+kind.what+" yet", "group", ng.Name, "missing", missing)
		return nil
	}
	m := Manual{Namespace: c.d.Namespace, Group: ng.Name, Token: token, CA: ca, Endpoints: endpoints}
	data, err := kind.data(m)
	if err != nil {
		return err
	}
	annotations := map[string]string{
		deckhousev1.TokenExpiresAtAnnotation: token.Expires.UTC().Format(time.RFC3339),
		deckhousev1.TokenIDAnnotation:        token.ID,
	}
	ownLabels := map[string]string{deckhousev1.TokenNodeGroupLabel: ng.Name, deckhousev1.HeritageLabel: deckhousev1.HeritageNodeManager}

	name := kind.name(ng.Name)
	existing, err := c.manual.Secrets(c.d.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		_, err = c.d.Kube.CoreV1().Secrets(c.d.Namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.d.Namespace, Labels: ownLabels, Annotations: annotations},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}, metav1.CreateOptions{FieldManager: deckhousev1.NodeManagerControllerName})
		if err == nil {
			klog.FromContext(ctx).Info("Created the group's "+kind.what, "secret", klog.KRef(c.d.Namespace, name), "group", ng.Name, "token", token.ID, "expires", annotations[deckhousev1.TokenExpiresAtAnnotation])
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Secret %s/%s: %w", c.d.Namespace, name, err)
		}
		// The cache has not seen it yet (most likely our own last write).
		existing, err = c.d.Kube.CoreV1().Secrets(c.d.Namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("get Secret %s/%s: %w", c.d.Namespace, name, err)
	}
	if maps.EqualFunc(existing.Data, data, func(a, b []byte) bool { return string(a) == string(b) }) &&
		contains(existing.Annotations, annotations) && contains(existing.Labels, ownLabels) {
		return nil
	}
	updated := existing.DeepCopy()
	updated.Data = data
	updated.StringData = nil
	updated.Annotations = merge(updated.Annotations, annotations)
	updated.Labels = merge(updated.Labels, ownLabels)
	if _, err := c.d.Kube.CoreV1().Secrets(c.d.Namespace).Update(ctx, updated, metav1.UpdateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
		return fmt.Errorf("update Secret %s/%s: %w", c.d.Namespace, name, err)
	}
	klog.FromContext(ctx).Info("Updated the group's "+kind.what, "secret", klog.KRef(c.d.Namespace, name), "group", ng.Name, "token", token.ID, "expires", annotations[deckhousev1.TokenExpiresAtAnnotation])
	return nil
}

// clusterAccess is the cluster CA and the API server endpoints; missing
// names what is not there yet.
func (c *Controller) clusterAccess() (ca string, endpoints []string, missing string) {
	cm, err := c.configMap.ConfigMaps(metav1.NamespaceSystem).Get(deckhousev1.RootCAConfigMap)
	if err != nil || cm.Data[caKey] == "" {
		return "", nil, "ConfigMap kube-system/" + deckhousev1.RootCAConfigMap
	}
	list, err := c.slices.EndpointSlices(metav1.NamespaceDefault).List(
		labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: kubernetesService}))
	if err != nil {
		return "", nil, "EndpointSlices of default/kubernetes"
	}
	endpoints = ValidEndpoints(templates.APIServerEndpoints(list))
	if len(endpoints) == 0 {
		return "", nil, "ready endpoints in the EndpointSlices of default/kubernetes"
	}
	return cm.Data[caKey], endpoints, ""
}

func contains(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func merge(into, from map[string]string) map[string]string {
	if into == nil {
		into = map[string]string{}
	}
	maps.Copy(into, from)
	return into
}
