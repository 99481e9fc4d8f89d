package bundles

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/templates"
)

// The bashible-apiserver-context Secret.
//
// Deckhouse's NodeGroupConfiguration reference tells authors to list what
// their templates may read with
//
//	kubectl -n d8-cloud-instance-manager get secrets bashible-apiserver-context -o jsonpath='{.data.input\.yaml}' | base64 -d
//
// In Deckhouse that Secret is the server's input; here the contexts are
// built from the cluster by informers, and the leader writes the Secret as
// an output only, so that the documented command shows what templates
// see. Nothing reads it back: an edit changes no bundle, and the leader
// overwrites it.
//
// Shape (templates/AUTHORING.md, "Where to read the context"): Deckhouse's
// top-level keys where the context holds the same values (clusterDomain,
// clusterDNSAddress, apiserverEndpoints, kubernetesCA, proxy when set,
// nodeGroups — each group's .nodeGroup, as Deckhouse's nodeGroups elements
// are); then renderContext: the other top-level keys of the contexts,
// under common when every group has the same value and under
// groups.<group> otherwise. Sharing what is common keeps the Secret small:
// a group costs its nodeGroup (about 1 KiB of YAML with a few labels) and
// what differs. Deckhouse's keys that no template here reads
// (bootstrapTokens — credentials to join a group —, allowedBundles, ...)
// are not written.
//
// Credentials are redacted (templates.Context.Redacted): registry
// credentials, the user information of proxy and package URLs, NodeUsers'
// password hashes. Deckhouse writes its proxy URLs and bootstrap tokens
// as they are; here the Secret holds no credential, so it may be shown to
// someone who cannot read the credentials themselves.
//
// Size: a Secret holds at most 1 MiB. With about 1 KiB a group, some 900
// groups fit; should the document not fit (1,000 groups with large node
// templates), the groups are taken in name order while the document fits
// in MaxContextBytes and the names of the others are listed under
// nodeGroupsOmitted (their contexts: the NodeGroup's spec with the
// defaults AUTHORING.md gives). The result depends only on the contexts,
// so every leader writes the same bytes.

// MaxContextBytes bounds input.yaml, 24 KiB below the 1 MiB a Secret may
// hold, as MaxEncodedBundleBytes does for bundles.
const MaxContextBytes = 1000 << 10

// contextHeader opens input.yaml for whoever decodes it.
const contextHeader = `# The render context of every node group, as bashible-apiserver's templates and NodeGroupConfigurations see it.
# A group's context: nodeGroup is its element of nodeGroups; every other key is renderContext.groups.<group>.<key>
# when that is present, else renderContext.common.<key>. Credentials show as [redacted] (templates see them).
# Written by bashible-apiserver's leader; edits are overwritten and change nothing. See templates/AUTHORING.md.
`

// contextDocument encodes the contexts of the groups (by group name) as
// input.yaml, at most limit bytes, and returns the groups left out to
// stay within it.
func contextDocument(contexts map[string]*templates.Context, limit int) ([]byte, []string, error) {
	names := slices.Sorted(maps.Keys(contexts))
	values := make(map[string]map[string]any, len(names))
	for _, name := range names {
		redacted, err := contexts[name].Redacted()
		if err != nil {
			return nil, nil, fmt.Errorf("node group %s: %w", name, err)
		}
		if values[name], err = redacted.Values(); err != nil {
			return nil, nil, fmt.Errorf("node group %s: %w", name, err)
		}
	}
	common := commonKeys(names, values)
	doc, err := encodeContexts(names, nil, values, common)
	if err != nil || len(doc) <= limit {
		return doc, nil, err
	}
	// Too large: the most groups, in name order, that fit. Encoding a
	// megabyte of YAML takes a second, so the size of each group's part is
	// measured once and the count chosen from the sums; the final encoding
	// checks it (and drops a group more in the rare case it is off).
	base, err := encodeContexts(nil, nil, values, common)
	if err != nil {
		return nil, nil, err
	}
	costs := make([]int, len(names))
	for i, name := range names {
		if costs[i], err = groupCost(name, values[name], common); err != nil {
			return nil, nil, err
		}
	}
	omitCosts := make([]int, len(names))
	for i, name := range names {
		item, err := yaml.Marshal([]string{name})
		if err != nil {
			return nil, nil, err
		}
		omitCosts[i] = len(item)
	}
	budget := limit - len(base) - len("nodeGroupsOmitted:\n")
	for _, c := range omitCosts {
		budget -= c
	}
	n := 0
	for n < len(names) && budget-costs[n]+omitCosts[n] >= 0 {
		budget += omitCosts[n] - costs[n]
		n++
	}
	// The sums are exact but for the lines that differ between an empty
	// and a non-empty list: one group more may fit.
	if n < len(names) {
		if more, err := encodeContexts(names[:n+1], names[n+1:], values, common); err == nil && len(more) <= limit {
			n++
		}
	}
	for ; ; n-- {
		if doc, err = encodeContexts(names[:n], names[n:], values, common); err != nil {
			return nil, nil, err
		}
		if len(doc) <= limit || n == 0 {
			break
		}
	}
	if len(doc) > limit {
		return nil, nil, fmt.Errorf("the render context without any node group is %d bytes, more than the %d bytes of the Secret %s", len(doc), limit, deckhousev1.ContextSecret)
	}
	return doc, names[n:], nil
}

// commonKeys are the top-level keys of the contexts (but nodeGroup) whose
// value is the same in every group's.
func commonKeys(names []string, values map[string]map[string]any) map[string]bool {
	common := map[string]bool{}
	if len(names) == 0 {
		return common
	}
	first := values[names[0]]
	for key, v := range first {
		if key == "nodeGroup" {
			continue
		}
		same := true
		for _, name := range names[1:] {
			if !reflect.DeepEqual(values[name][key], v) {
				same = false
				break
			}
		}
		common[key] = same
	}
	return common
}

// ownValues are the keys of a group's context that are not common.
func ownValues(v map[string]any, common map[string]bool) map[string]any {
	own := map[string]any{}
	for key, same := range common {
		if !same {
			own[key] = v[key]
		}
	}
	return own
}

// groupCost is what a group adds to the document: its element of
// nodeGroups (a top-level list, which is not indented) and its entry of
// renderContext.groups (indented four spaces more than on its own).
func groupCost(name string, v map[string]any, common map[string]bool) (int, error) {
	elem, err := yaml.Marshal([]any{v["nodeGroup"]})
	if err != nil {
		return 0, fmt.Errorf("encode node group %s: %w", name, err)
	}
	entry, err := yaml.Marshal(map[string]any{name: ownValues(v, common)})
	if err != nil {
		return 0, fmt.Errorf("encode node group %s: %w", name, err)
	}
	return len(elem) + len(entry) + 4*bytes.Count(entry, []byte("\n")), nil
}

// encodeContexts writes the document for the groups named (sorted), with
// omitted listed as left out; common says which keys are common.
func encodeContexts(names, omitted []string, values map[string]map[string]any, common map[string]bool) ([]byte, error) {
	top := map[string]any{}
	nodeGroups := make([]any, 0, len(names))
	shared := map[string]any{}
	groups := make(map[string]map[string]any, len(names))
	for _, name := range names {
		nodeGroups = append(nodeGroups, values[name]["nodeGroup"])
		groups[name] = ownValues(values[name], common)
	}
	// Deckhouse's cluster-wide keys and the common ones, the same in
	// every group's context: from any group's.
	var sample map[string]any
	for _, v := range values {
		sample = v
		break
	}
	if sample != nil {
		cluster, _ := sample["cluster"].(map[string]any)
		normal, _ := sample["normal"].(map[string]any)
		top["clusterDomain"] = cluster["clusterDomain"]
		top["clusterDNSAddress"] = cluster["clusterDNSAddress"]
		top["apiserverEndpoints"] = normal["apiserverEndpoints"]
		if ca, _ := normal["kubernetesCA"].(string); ca != "" {
			top["kubernetesCA"] = ca
		}
		if sample["proxy"] != nil {
			top["proxy"] = sample["proxy"]
		}
		for key, same := range common {
			if same {
				shared[key] = sample[key]
			}
		}
	}
	top["nodeGroups"] = nodeGroups
	top["renderContext"] = map[string]any{"common": shared, "groups": groups}
	if len(omitted) > 0 {
		top["nodeGroupsOmitted"] = omitted
	}
	body, err := yaml.Marshal(top) // sorted keys: the same bytes for the same contexts
	if err != nil {
		return nil, fmt.Errorf("encode the render contexts: %w", err)
	}
	return append([]byte(contextHeader), body...), nil
}

// writeContext makes the Secret ContextSecret in deckhousev1.Namespace
// hold the render contexts of results, writing only when its content
// differs (a new render, or someone's edit or deletion, which the
// informer reports). Groups whose context could not be built are left
// out: their NodeGroup's Rendered condition says why.
func (c *Controller) writeContext(ctx context.Context, results map[string]*Result) error {
	contexts := make(map[string]*templates.Context, len(results))
	for group, r := range results {
		if r.Context != nil {
			contexts[group] = r.Context
		}
	}
	// A group whose render was reused keeps its context (the same
	// pointer): with no new context, the document is the last one, which
	// spares a leader of many groups re-encoding it on every publish.
	memo := &c.contextDoc
	if memo.doc == nil || !maps.Equal(memo.contexts, contexts) {
		doc, omitted, err := contextDocument(contexts, MaxContextBytes)
		if err != nil {
			return fmt.Errorf("render context Secret %s/%s: %w", deckhousev1.Namespace, deckhousev1.ContextSecret, err)
		}
		*memo = contextMemo{contexts: contexts, doc: doc, omitted: omitted}
	}
	doc, omitted := memo.doc, memo.omitted
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: deckhousev1.ContextSecret, Namespace: deckhousev1.Namespace,
			Labels: map[string]string{deckhousev1.PublishedBundleAppLabel: deckhousev1.BashibleAPIServerName},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{deckhousev1.ContextSecretKey: doc},
	}
	shown, err := c.contextSecrets.Secrets(deckhousev1.Namespace).Get(deckhousev1.ContextSecret)
	if apierrors.IsNotFound(err) {
		// Not in the informer; the leader may have created it already
		// (ownWrites), so no later step may take err for a failed write.
		shown, err = nil, nil
	}
	if err != nil {
		return err
	}
	current := c.own.current(deckhousev1.ContextSecret, shown)
	if current != nil && contextUpToDate(current, want) {
		return nil
	}
	secrets := c.cfg.Kube.CoreV1().Secrets(deckhousev1.Namespace)
	if current != nil && (current.Type != want.Type || ptr.Deref(current.Immutable, false)) {
		// An update cannot change these: replace the Secret.
		err := secrets.Delete(ctx, want.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &current.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replace Secret %s/%s (type %s, immutable %t): %w", deckhousev1.Namespace, want.Name, current.Type, ptr.Deref(current.Immutable, false), err)
		}
		current = nil
	}
	var written *corev1.Secret
	if current == nil {
		written, err = secrets.Create(ctx, want, metav1.CreateOptions{FieldManager: deckhousev1.BashibleAPIServerName})
		if apierrors.IsAlreadyExists(err) {
			// The informer has not seen it yet.
			if current, err = secrets.Get(ctx, want.Name, metav1.GetOptions{}); err == nil && contextUpToDate(current, want) {
				c.own.wrote(want.Name, shown, current, current)
				return nil
			}
		}
	}
	if current != nil && err == nil {
		want.ResourceVersion = current.ResourceVersion
		written, err = secrets.Update(ctx, want, metav1.UpdateOptions{FieldManager: deckhousev1.BashibleAPIServerName})
	}
	if err != nil {
		return fmt.Errorf("write the render contexts to Secret %s/%s: %w", deckhousev1.Namespace, want.Name, err)
	}
	c.own.wrote(want.Name, shown, current, written)
	klog.InfoS("Wrote the render contexts", "secret", klog.KRef(deckhousev1.Namespace, want.Name), "groups", len(contexts)-len(omitted), "bytes", len(doc))
	if len(omitted) > 0 {
		klog.InfoS("Render contexts left out of the Secret, which would exceed its size limit", "secret", klog.KRef(deckhousev1.Namespace, want.Name),
			"limit", MaxContextBytes, "omitted", len(omitted), "firstOmitted", omitted[0])
	}
	return nil
}

// contextMemo is the last document writeContext built, and from what.
// Only the publish worker uses it.
type contextMemo struct {
	contexts map[string]*templates.Context
	doc      []byte
	omitted  []string
}

// contextUpToDate reports whether current holds exactly what want does.
func contextUpToDate(current, want *corev1.Secret) bool {
	return current.Type == want.Type && !ptr.Deref(current.Immutable, false) && len(current.Data) == 1 &&
		bytes.Equal(current.Data[deckhousev1.ContextSecretKey], want.Data[deckhousev1.ContextSecretKey]) &&
		maps.Equal(current.Labels, want.Labels)
}
