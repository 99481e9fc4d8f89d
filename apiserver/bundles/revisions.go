package bundles

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// DefaultRevisionHistory is how many revisions of each group are kept when
// bashible-apiserver's --revision-history is not set.
const DefaultRevisionHistory = 5

// maxChangedStepsShown bounds the steps a revision lists as changed, so
// the annotation and the served list stay small whatever a change did.
const maxChangedStepsShown = 20

// RevisionInfo describes one kept revision of a group's bundle; the group's
// published Secret carries the list (Published.Revisions), which is how
// every replica serves it without holding the revisions' contents.
type RevisionInfo struct {
	Revision  int64       `json:"revision"`
	Checksum  string      `json:"checksum"`
	Published metav1.Time `json:"published"`
	// ChangedSteps are the steps that changed since the revision before.
	ChangedSteps []string `json:"changedSteps,omitempty"`
}

// revisions keeps the last revisions of every group's bundle in the
// cluster, one immutable Secret per revision
// (RevisionSecretPrefix<group>-<n>, labelled RevisionOfLabel=<group>), for
// pinning and rollback. Only the leader calls it. A revision is a bundle
// the group's render published (or would have, while the group is
// pinned), numbered from 1 in publishing order; the newest keep of them
// are kept, and the revision a group is pinned to is never pruned.
//
// Everything it decides derives from the Secrets in the cluster: a new
// revision's number is one more than the newest revision Secret's, and
// creating a revision that already exists with the same checksum is a
// success. So a leader that lost its predecessor's memory, or whose own
// view is stale, numbers revisions exactly as any other leader would.
type revisions struct {
	kube      kubernetes.Interface
	namespace string
	keep      int

	mu sync.Mutex
	// loaded caches decoded revisions by Secret name and UID: revision
	// Secrets are immutable, so these always mean the same bundle.
	loaded map[revisionKey]*Published
}

func newRevisions(kube kubernetes.Interface, namespace string, keep int) *revisions {
	if keep <= 0 {
		keep = DefaultRevisionHistory
	}
	return &revisions{kube: kube, namespace: namespace, keep: keep, loaded: map[revisionKey]*Published{}}
}

// revisionKey names one revision Secret ever written.
type revisionKey struct {
	name string
	uid  types.UID
}

// revisionSecretName is the Secret of revision n of group.
func revisionSecretName(group string, n int64) string {
	return deckhousev1.RevisionSecretPrefix + group + "-" + strconv.FormatInt(n, 10)
}

// record makes current (a bundle the group's render produced) the
// group's newest revision, unless it already is, and prunes the revisions
// beyond the kept ones (never pinned). index is the revision list the
// group's published Secret carries; when its newest revision is current,
// nothing is asked of the API. It returns the kept revisions, oldest
// first, and current's revision number. A bundle too large for a Secret
// is a *BundleTooLargeError and is not recorded.
func (r *revisions) record(ctx context.Context, current *Published, index []RevisionInfo, pinned int64) ([]RevisionInfo, int64, error) {
	if n := len(index); n > 0 && index[n-1].Checksum == current.Checksum {
		return index, index[n-1].Revision, nil
	}
	kept, err := r.list(ctx, current.Group)
	if err != nil {
		return nil, 0, err
	}
	if n := len(kept); n > 0 && kept[n-1].Checksum == current.Checksum {
		return kept, kept[n-1].Revision, nil
	}
	number := int64(1)
	var changed []string
	if n := len(kept); n > 0 {
		number = kept[n-1].Revision + 1
		previous, err := r.load(ctx, current.Group, kept[n-1].Revision)
		switch {
		case err == nil:
			changed = changedSteps(previous, current)
		case !apierrors.IsNotFound(err):
			return nil, 0, err
		}
	}
	rev := revisionOf(current, number)
	created, err := r.create(ctx, rev, changed)
	if err != nil {
		return nil, 0, err
	}
	klog.FromContext(ctx).Info("Recorded a bundle revision", "revision", number, "checksum", current.Checksum, "changedSteps", changed)
	kept = append(kept, RevisionInfo{Revision: number, Checksum: current.Checksum, Published: created.Rfc3339Copy(), ChangedSteps: changed})
	return r.prune(ctx, current.Group, kept, pinned)
}

// revisionOf is p as stored in revision n: the bundle alone, without the
// publishing state (the revision list, the pin) of the group's Secret.
func revisionOf(p *Published, n int64) *Published {
	rev := *p
	rev.Revision, rev.PinnedRevision, rev.Revisions = n, 0, nil
	return &rev
}

// create writes revision rev.Revision of rev.Group and returns when its
// Secret was created.
func (r *revisions) create(ctx context.Context, rev *Published, changed []string) (metav1.Time, error) {
	name := revisionSecretName(rev.Group, rev.Revision)
	data, err := encodeSecretData(rev)
	if err != nil {
		return metav1.Time{}, err
	}
	if err := checkEncodedSize(rev, data[deckhousev1.PublishedBundleKey]); err != nil {
		return metav1.Time{}, err
	}
	annotations := map[string]string{bashiblev1alpha1.ChecksumAnnotation: rev.Checksum}
	if rev.TemplatesDigest != "" {
		annotations[bashiblev1alpha1.TemplatesDigestAnnotation] = rev.TemplatesDigest
	}
	if len(changed) > 0 {
		annotations[bashiblev1alpha1.ChangedStepsAnnotation] = strings.Join(changed, ",")
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: r.namespace,
			Labels: map[string]string{
				deckhousev1.RevisionOfLabel:         rev.Group,
				bashiblev1alpha1.RevisionAnnotation: strconv.FormatInt(rev.Revision, 10),
			},
			Annotations: annotations,
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: ptr.To(true),
		Data:      data,
	}
	secrets := r.kube.CoreV1().Secrets(r.namespace)
	created, err := secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: deckhousev1.BashibleAPIServerName})
	if err == nil {
		return created.CreationTimestamp, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return metav1.Time{}, fmt.Errorf("record revision %d of group %s as Secret %s/%s: %w", rev.Revision, rev.Group, r.namespace, name, err)
	}
	// Another term (or this one, before its view caught up) recorded it.
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return metav1.Time{}, fmt.Errorf("read revision Secret %s/%s of group %s: %w", r.namespace, name, rev.Group, err)
	}
	if sum := existing.Annotations[bashiblev1alpha1.ChecksumAnnotation]; sum != rev.Checksum {
		return metav1.Time{}, fmt.Errorf("revision %d of group %s exists as Secret %s/%s with checksum %s, not %s; "+
			"the revision list is re-read on the next publish", rev.Revision, rev.Group, r.namespace, name, sum, rev.Checksum)
	}
	return existing.CreationTimestamp, nil
}

// list reads the group's revisions from the API, oldest first. A Secret
// whose revision label is not a number is no revision and is ignored.
func (r *revisions) list(ctx context.Context, group string) ([]RevisionInfo, error) {
	secrets, err := r.kube.CoreV1().Secrets(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.RevisionOfLabel + "=" + group})
	if err != nil {
		return nil, fmt.Errorf("list the revisions of group %s in namespace %s: %w", group, r.namespace, err)
	}
	var out []RevisionInfo
	for _, s := range secrets.Items {
		n, err := strconv.ParseInt(s.Labels[bashiblev1alpha1.RevisionAnnotation], 10, 64)
		if err != nil || n < 1 || s.Name != revisionSecretName(group, n) {
			continue
		}
		info := RevisionInfo{Revision: n, Checksum: s.Annotations[bashiblev1alpha1.ChecksumAnnotation], Published: s.CreationTimestamp.Rfc3339Copy()}
		if c := s.Annotations[bashiblev1alpha1.ChangedStepsAnnotation]; c != "" {
			info.ChangedSteps = strings.Split(c, ",")
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b RevisionInfo) int { return cmp.Compare(a.Revision, b.Revision) })
	return out, nil
}

// prune deletes the revisions older than the newest keep, except the one
// pinned, and returns those kept.
func (r *revisions) prune(ctx context.Context, group string, kept []RevisionInfo, pinned int64) ([]RevisionInfo, int64, error) {
	newest := kept[len(kept)-1].Revision
	excess := len(kept) - r.keep
	out := make([]RevisionInfo, 0, len(kept))
	var errs []error
	for i, rev := range kept {
		if i >= excess || rev.Revision == pinned {
			out = append(out, rev)
			continue
		}
		name := revisionSecretName(group, rev.Revision)
		err := r.kube.CoreV1().Secrets(r.namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("prune revision %d of group %s (Secret %s/%s): %w", rev.Revision, group, r.namespace, name, err))
			out = append(out, rev)
			continue
		}
		klog.FromContext(ctx).Info("Pruned a bundle revision", "revision", rev.Revision, "keep", r.keep)
	}
	return out, newest, errors.Join(errs...)
}

// load reads revision n of group, verified against its checksum.
func (r *revisions) load(ctx context.Context, group string, n int64) (*Published, error) {
	name := revisionSecretName(group, n)
	s, err := r.kube.CoreV1().Secrets(r.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	key := revisionKey{name: s.Name, uid: s.UID}
	p, ok := r.loaded[key]
	r.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err = decodeBundle(s)
	if err != nil {
		return nil, err
	}
	if p.Group != group || p.Revision != n {
		return nil, fmt.Errorf("secret %s/%s holds revision %d of group %q, not revision %d of %q", s.Namespace, s.Name, p.Revision, p.Group, n, group)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.loaded) >= 4*r.keep {
		clear(r.loaded) // a bound, not a policy: pins change rarely
	}
	r.loaded[key] = p
	return p, nil
}

// deleteAll deletes every revision of a group that is gone.
func (r *revisions) deleteAll(ctx context.Context, group string) error {
	kept, err := r.list(ctx, group)
	if err != nil {
		return err
	}
	for _, rev := range kept {
		name := revisionSecretName(group, rev.Revision)
		if err := r.kube.CoreV1().Secrets(r.namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete revision %d of removed group %s (Secret %s/%s): %w", rev.Revision, group, r.namespace, name, err)
		}
	}
	return nil
}

// changedSteps are the parts of cur that differ from prev: steps added,
// changed or removed, and bashible.sh; at most maxChangedStepsShown, and
// then "+<n> more".
func changedSteps(prev, cur *Published) []string {
	var out []string
	if !prev.Bashible.Equal(cur.Bashible) {
		out = append(out, bashiblev1alpha1.BashibleScriptKey)
	}
	names := slices.Sorted(maps.Keys(cur.Steps))
	for name := range prev.Steps {
		if _, ok := cur.Steps[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		pv, inPrev := prev.Steps[name]
		cv, inCur := cur.Steps[name]
		if inPrev != inCur || pv != cv {
			out = append(out, name)
		}
	}
	if len(out) > maxChangedStepsShown {
		more := len(out) - maxChangedStepsShown
		out = append(out[:maxChangedStepsShown], "+"+strconv.Itoa(more)+" more")
	}
	return out
}

// hasRevision reports whether index lists revision n.
func hasRevision(index []RevisionInfo, n int64) bool {
	return slices.ContainsFunc(index, func(r RevisionInfo) bool { return r.Revision == n })
}
