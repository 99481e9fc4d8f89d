// Package bundles turns cluster state into the bundles bashible-apiserver
// serves, and keeps every replica serving the same ones.
//
// How replicas agree (and why a broken change is never rolled out half-way):
//
//  1. Every replica renders every node group from its informers (Renderer).
//  2. One replica, the leader of the Lease bashible-apiserver, publishes each
//     group's bundle as a Secret bashible-bundle-<group> in the namespace
//     deckhousev1.BundlesNamespace (publish). It writes only bundles that rendered
//     completely and fit in a Secret, and only when the checksum changed. A
//     group whose render fails, or whose bundle is too large to publish,
//     keeps its previous Secret: the last good bundle. The failure is
//     reported on the NodeGroupConfiguration and NodeGroup status, as an
//     Event and a metric.
//  3. Every replica serves what the Secrets hold (Store). Objects are
//     therefore byte-identical across replicas and across restarts, and
//     their resourceVersion is the Secret's etcd resourceVersion, which
//     means the same thing on every replica, so list-then-watch works
//     whichever replica a request lands on.
//
// Who may author a bundle. A node runs as root whatever its bundle says, so
// only bashible-apiserver may write one. The checksum inside a published
// Secret proves only that the Secret is intact, not who wrote it: anyone who
// can write the Secret can recompute it. The guarantee therefore rests on
// who can write there. Published bundles live in a namespace of their own
// (deckhousev1.BundlesNamespace, default d8-bashible-bundles) in which only
// bashible-apiserver's ServiceAccount is granted any write (Secrets and its
// leader Lease, manifests/bashible-apiserver/rbac.yaml); node-manager-
// controller, which writes Secrets in d8-cloud-instance-manager, has no
// rights there at all. The remaining writers are those who may write
// Secrets in every namespace — cluster administrators — and they could as
// well read any signing key, so signing the bundles (an HMAC with a key only
// bashible-apiserver reads) would add no protection the namespace does not
// already give, and is not done.
//
// Should a writer change or delete a published Secret anyway, the leader
// rewrites it from the group's last good bundle (lastGood), even while the
// group's current render fails; a follower takes what the leader publishes
// as the last good bundle, so after a failover the new leader restores the
// same one. A bundle is deleted only when its NodeGroup is confirmed gone by
// the API itself, never because the informer showed no groups for a moment.
package bundles

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/templates"
)

// Where and under which names bundles are published is fixed in
// apiserver/apis/deckhouse/v1/well_known.go: the namespace BundlesNamespace
// (bashible-apiserver's --bundles-namespace), Secrets
// PublishedBundleSecretPrefix + group labelled PublishedBundleAppLabel, the
// bundle under PublishedBundleKey, and the leader Lease BashibleAPIServerName.

// maxBundleBytes bounds a decompressed bundle, so a corrupt Secret cannot
// exhaust memory.
const maxBundleBytes = 64 << 20

// Published is one group's bundle as stored and served.
type Published struct {
	Group             string            `json:"group"`
	NodeType          string            `json:"nodeType"`
	KubernetesVersion string            `json:"kubernetesVersion"`
	CRI               string            `json:"cri"`
	Checksum          string            `json:"checksum"`
	Bashible          string            `json:"bashible"`
	Steps             map[string]string `json:"steps"`
	Bootstrap         string            `json:"bootstrap"`
	// ResourceVersion and CreationTimestamp come from the Secret.
	ResourceVersion   string      `json:"-"`
	CreationTimestamp metav1.Time `json:"-"`
	// TemplatesDigest is the template tree the bundle was rendered from,
	// from the Secret's annotation; empty for a fresh render (the
	// renderer's tree).
	TemplatesDigest string `json:"-"`
}

// Size is the number of bytes of script the group's nodes receive.
func (p *Published) Size() int {
	n := len(p.Bashible)
	for _, s := range p.Steps {
		n += len(s)
	}
	return n
}

// encodeSecretData compresses a bundle for a Secret. gzip's header carries
// no time or name here, so equal bundles encode to equal bytes.
func encodeSecretData(p *Published) (map[string][]byte, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode bundle of %s: %w", p.Group, err)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return map[string][]byte{deckhousev1.PublishedBundleKey: buf.Bytes()}, nil
}

// decodeSecret reads a published bundle from its Secret.
func decodeSecret(s *corev1.Secret) (*Published, error) {
	zr, err := gzip.NewReader(bytes.NewReader(s.Data[deckhousev1.PublishedBundleKey]))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, deckhousev1.PublishedBundleKey, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxBundleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, deckhousev1.PublishedBundleKey, err)
	}
	if len(raw) > maxBundleBytes {
		return nil, fmt.Errorf("secret %s/%s: bundle is larger than %d bytes", s.Namespace, s.Name, maxBundleBytes)
	}
	var p Published
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, deckhousev1.PublishedBundleKey, err)
	}
	if p.Group == "" || deckhousev1.PublishedBundleSecretPrefix+p.Group != s.Name || p.Checksum == "" {
		return nil, fmt.Errorf("secret %s/%s does not hold a bundle of group %q", s.Namespace, s.Name, p.Group)
	}
	// Serve only what the checksum describes: an edited Secret is refused
	// (and the leader rewrites it) rather than served under a false checksum.
	if sum := templates.Checksum(p.Bashible, p.Steps); sum != p.Checksum {
		return nil, fmt.Errorf("secret %s/%s: its content does not match its checksum %s", s.Namespace, s.Name, p.Checksum)
	}
	p.ResourceVersion = s.ResourceVersion
	p.CreationTimestamp = s.CreationTimestamp
	p.TemplatesDigest = s.Annotations[bashiblev1alpha1.TemplatesDigestAnnotation]
	return &p, nil
}
