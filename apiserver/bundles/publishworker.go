package bundles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// publishKey is the publish queue's only item.
const publishKey = "publish"

// publishWorker runs publishLatest for the publish item until the queue
// shuts down, retrying with backoff when publishing fails.
func (c *Controller) publishWorker(ctx context.Context) {
	for {
		key, quit := c.publishQ.Get()
		if quit {
			return
		}
		err := c.publishLatest()
		c.publishQ.Done(key)
		c.cfg.Settle.Done()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Publishing bundles failed; will retry")
			c.publishQ.AddRateLimited(key)
			continue
		}
		c.publishQ.Forget(key)
	}
}

// publishLatest publishes, on the leader, every group's latest result.
func (c *Controller) publishLatest() error {
	leaderCtx := c.leaderCtx.Load()
	if !c.leading.Load() || leaderCtx == nil || (*leaderCtx).Err() != nil {
		return nil
	}
	// Every write ends with the term, even before client-go ends it.
	ctx, cancel, ok := c.term.termContext(*leaderCtx)
	defer cancel()
	if !ok {
		// The last renewal began more than RenewDeadline ago, yet client-go
		// has not ended the term: a late renewal may still extend it. Look
		// again after a retry period rather than drop what changed; if the
		// term ends instead, the next one publishes at its start.
		c.publishQ.AddAfter(publishKey, c.cfg.RetryPeriod)
		return nil
	}
	in, err := c.inputs()
	if err != nil {
		return err
	}
	results, ready := c.latestResults(in.NodeGroups)
	if !ready {
		return nil // the last group's first render enqueues a publish
	}
	// Every bundle is published as soon as its group renders, but a
	// NodeGroupConfiguration's status is reported only once every group it
	// selects has rendered the current state: its message lists the groups
	// and what failed in each, and must not be a mix of old and new. The
	// last of those renders enqueues another publish.
	configs := make([]*deckhousev1alpha1.NodeGroupConfiguration, 0, len(in.Configs))
	for _, ngc := range in.Configs {
		if c.allSettled(ngc, in.NodeGroups) {
			configs = append(configs, ngc)
		}
	}
	in.Configs = configs
	return c.publish(ctx, in, results)
}

// allSettled reports whether ngc's status can be told: every existing
// group it selects, or whose latest render still applied it, has no render
// queued or running, and its latest render read this very spec of ngc. The
// last condition matters because an informer's cache shows a change before
// its handlers have queued the renders: a group can look settled while its
// result is older than the configuration (a new one would be reported as
// matching no group).
func (c *Controller) allSettled(ngc *deckhousev1alpha1.NodeGroupConfiguration, ngs []*deckhousev1.NodeGroup) bool {
	c.resultsMu.Lock()
	defer c.resultsMu.Unlock()
	for _, ng := range ngs {
		selected := slices.Contains(ngc.Spec.NodeGroups, "*") || slices.Contains(ngc.Spec.NodeGroups, ng.Name)
		if r := c.results[ng.Name]; !selected && (r == nil || !slices.Contains(r.Custom, ngc.Name)) {
			continue
		}
		if v, read := c.renderedFrom[ng.Name][ngc.Name]; !read || v != versionOf(ngc) || c.dirty[ng.Name] || c.inflight[ng.Name] {
			return false
		}
	}
	return true
}

// latestResults are the latest results of the groups that exist, and
// whether every group has had one since this replica started (a group
// created since then may still be missing: it has nothing published yet).
func (c *Controller) latestResults(ngs []*deckhousev1.NodeGroup) (map[string]*Result, bool) {
	c.resultsMu.Lock()
	defer c.resultsMu.Unlock()
	results := make(map[string]*Result, len(ngs))
	for _, ng := range ngs {
		if r := c.results[ng.Name]; r != nil {
			results[ng.Name] = r
		}
	}
	if !c.allRendered {
		if len(results) < len(ngs) {
			return nil, false
		}
		c.allRendered = true
	}
	return results, true
}

// publish writes the bundles (or the revisions groups are pinned to),
// records revisions, restores tampered bundles, deletes those of removed
// groups, writes the render contexts (writeContext), and reports render failures and pins on the objects at fault.
func (c *Controller) publish(ctx context.Context, in Inputs, results map[string]*Result) error {
	var errs []error
	tooLarge := map[string]*BundleTooLargeError{}
	pins := map[string]*pinOutcome{}
	groups := make(map[string]*deckhousev1.NodeGroup, len(in.NodeGroups))
	for _, ng := range in.NodeGroups {
		groups[ng.Name] = ng
	}
	for _, group := range sortedGroups(results) {
		// Every line of the group's publish says which group it is.
		ctx := klog.NewContext(ctx, klog.FromContext(ctx).WithValues("group", group))
		big, pin, err := c.publishGroup(ctx, pinOf(groups[group]), results[group])
		if err != nil {
			errs = append(errs, err)
		}
		pins[group] = pin
		if big != nil {
			tooLarge[group] = big
			c.cfg.Metrics.BundleTooLarge.WithLabelValues(group).Set(1)
		} else {
			c.cfg.Metrics.BundleTooLarge.WithLabelValues(group).Set(0)
		}
	}
	errs = append(errs, c.deleteRemoved(ctx, results)...)
	if err := c.writeContext(ctx, results); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.reportConfigs(ctx, in.Configs, results, tooLarge)...)
	errs = append(errs, c.reportNodeGroups(ctx, in.NodeGroups, results, tooLarge, pins)...)
	return errors.Join(errs...)
}

// publishGroup records r's bundle as the group's newest revision and
// publishes what the group's nodes are to receive: that bundle, or the
// revision the group is pinned to (pin, zero for none). When r has no
// bundle to publish (the render failed, or the bundle is too large for a
// Secret, which it returns) it writes the group's last good bundle
// instead: writeBundle leaves an intact Secret alone, so this only
// restores one that someone else changed or deleted. It returns what the
// pin (req) came to, nil when the group is not pinned.
func (c *Controller) publishGroup(ctx context.Context, req pinRequest, r *Result) (*BundleTooLargeError, *pinOutcome, error) {
	pin := req.revision
	var big *BundleTooLargeError
	prev := c.lastGood.get(r.Group)
	var index []RevisionInfo
	if prev != nil {
		index = prev.Revisions
	}
	var current *Published
	if r.Published != nil {
		fresh := *r.Published
		fresh.TemplatesDigest = c.templatesDigest(r.Published)
		kept, number, err := c.revisions.record(ctx, &fresh, index, pin)
		switch {
		case errors.As(err, &big):
			klog.FromContext(ctx).Info("Node group's bundle is too large to publish; it keeps its last good bundle",
				"encodedBytes", big.Encoded, "limit", big.Limit)
		case err != nil && kept == nil:
			return nil, nil, err
		default:
			if err != nil {
				klog.FromContext(ctx).Error(err, "Pruning bundle revisions failed; will retry on the next publish")
			}
			index = kept
			fresh.Revision = number
			current = &fresh
		}
	}
	served, outcome, err := c.chooseServed(ctx, r.Group, req, r.ClusterSettingsDigest, current, prev, index)
	if err != nil || served == nil {
		return big, outcome, err
	}
	next := *served
	next.Revisions = index
	wrote, err := c.writeBundle(ctx, &next)
	if errors.As(err, &big) {
		// Only the revision list made it too large: keep what is published.
		klog.FromContext(ctx).Info("Node group's bundle is too large to publish with its revision list; it keeps its last good bundle",
			"encodedBytes", big.Encoded, "limit", big.Limit)
		return big, outcome, nil
	}
	if err != nil {
		return big, outcome, err
	}
	c.lastGood.wrote(&next)
	if wrote && current == nil && pin == 0 {
		klog.FromContext(ctx).Info("Restored a published bundle that was changed or deleted by someone else", "checksum", next.Checksum)
	}
	return big, outcome, nil
}

// sortedGroups are the groups of results in name order, so that publishing
// and status messages follow a stable order.
func sortedGroups(results map[string]*Result) []string {
	groups := make([]string, 0, len(results))
	for g := range results {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return groups
}

// writeBundle makes p's Secret hold exactly p, and says whether it wrote.
// A bundle too large for a Secret is a *BundleTooLargeError.
func (c *Controller) writeBundle(ctx context.Context, p *Published) (bool, error) {
	name := deckhousev1.PublishedBundleSecretPrefix + p.Group
	shown, err := c.published.Secrets(c.cfg.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		shown, err = nil, nil
	}
	if err != nil {
		return false, err
	}
	current := c.own.current(name, shown)
	digest := c.templatesDigest(p)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: c.cfg.Namespace,
			Labels:      map[string]string{deckhousev1.PublishedBundleAppLabel: deckhousev1.BashibleAPIServerName, deckhousev1.NodeGroupLabel: p.Group},
			Annotations: map[string]string{bashiblev1alpha1.ChecksumAnnotation: p.Checksum, bashiblev1alpha1.TemplatesDigestAnnotation: digest},
		},
		Type: corev1.SecretTypeOpaque,
	}
	// Encoding a bundle takes milliseconds (gzip at its best compression),
	// and every publish passes every group: a bundle encoded before is
	// compared by the digest of its encoding instead.
	meta, err := bundleMeta(p)
	if err != nil {
		return false, err
	}
	if memo := c.encoded[p.Group]; memo != nil && memo.encodes(p, meta) && current != nil && bundleUpToDate(current, secret, memo.digest) {
		return false, nil
	}
	data, err := encodeSecretData(p)
	if err != nil {
		return false, err
	}
	if err := checkEncodedSize(p, data[deckhousev1.PublishedBundleKey]); err != nil {
		return false, err
	}
	encoded := &encodedBundle{bundle: p, meta: meta, digest: sha256.Sum256(data[deckhousev1.PublishedBundleKey])}
	c.encoded[p.Group] = encoded
	secret.Data = data
	// The encoding is deterministic, so equal bytes mean an equal bundle;
	// anything else (a new render, or someone's edit) is rewritten.
	if current != nil && bundleUpToDate(current, secret, encoded.digest) {
		return false, nil
	}
	secrets := c.cfg.Kube.CoreV1().Secrets(c.cfg.Namespace)
	if current != nil && (current.Type != secret.Type || ptr.Deref(current.Immutable, false)) {
		// An update cannot change these: replace the Secret.
		err := secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &current.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("replace the published Secret of group %s (type %s, immutable %t): %w", p.Group, current.Type, ptr.Deref(current.Immutable, false), err)
		}
		current = nil
	}
	var written *corev1.Secret
	if current == nil {
		written, err = secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: deckhousev1.BashibleAPIServerName})
		if apierrors.IsAlreadyExists(err) {
			// It exists but the informer does not see it (its label was
			// removed): take it over.
			existing, getErr := secrets.Get(ctx, name, metav1.GetOptions{})
			if getErr != nil {
				return false, fmt.Errorf("publish bundle of group %s: %w", p.Group, getErr)
			}
			current = digestData(existing)
		}
	}
	if current != nil {
		secret.ResourceVersion = current.ResourceVersion
		written, err = secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: deckhousev1.BashibleAPIServerName})
	}
	if err != nil {
		return false, fmt.Errorf("publish bundle of group %s: %w", p.Group, err)
	}
	c.own.wrote(name, shown, current, digestData(written))
	klog.FromContext(ctx).Info("Published bundle", "checksum", p.Checksum, "bytes", p.Size())
	return true, nil
}

// bundleUpToDate reports whether current, as the informer keeps it (its
// data digested, digestData), holds exactly want's metadata and the
// encoding whose digest is given.
func bundleUpToDate(current, want *corev1.Secret, digest [sha256.Size]byte) bool {
	data, ok := current.Data[deckhousev1.PublishedBundleKey]
	return ok && len(current.Data) == 1 && maps.Equal(current.Annotations, want.Annotations) && maps.Equal(current.Labels, want.Labels) &&
		bytes.Equal(data, digest[:])
}

// encodedBundle is the bundle writeBundle last encoded for a group, and
// the digest of that encoding. Only the publish worker uses it.
type encodedBundle struct {
	// bundle is the bundle itself (the one the group's last good bundle
	// holds too); meta, its encoding without the scripts (bundleMeta).
	bundle *Published
	meta   []byte
	digest [sha256.Size]byte
}

// encodes reports whether p encodes as e's bundle did: the same scripts
// (interned, so equal ones are mostly the same string and compare at
// once) and the same other fields.
func (e *encodedBundle) encodes(p *Published, meta []byte) bool {
	return e.bundle.Bashible.Equal(p.Bashible) && e.bundle.Bootstrap == p.Bootstrap && maps.Equal(e.bundle.Steps, p.Steps) &&
		bytes.Equal(e.meta, meta)
}

// bundleMeta is p's encoding without its scripts: every other field, so
// that a field added to Published is compared without being listed here.
func bundleMeta(p *Published) ([]byte, error) {
	m := *p
	m.Bashible, m.Bootstrap, m.Steps, m.scripts = Script{}, "", nil, nil
	raw, err := json.Marshal(&m)
	if err != nil {
		return nil, fmt.Errorf("encode bundle of %s: %w", p.Group, err)
	}
	return raw, nil
}

// templatesDigest is the template tree p was rendered from.
func (c *Controller) templatesDigest(p *Published) string {
	if p.TemplatesDigest != "" {
		return p.TemplatesDigest
	}
	return c.cfg.Renderer.TemplatesDigest()
}
