package bundles

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/templates"
)

const (
	// maxBundleBytes bounds a decompressed bundle, so a corrupt Secret cannot
	// exhaust memory.
	maxBundleBytes = 64 << 20
)

// Published is one group's bundle as stored and served.
type Published struct {
	Group             string `json:"group"`
	NodeType          string `json:"nodeType"`
	KubernetesVersion string `json:"kubernetesVersion"`
	CRI               string `json:"cri"`
	Checksum          string `json:"checksum"`
	// Bashible is held as pieces shared between groups (Script).
	Bashible  Script            `json:"bashible"`
	Steps     map[string]string `json:"steps"`
	Bootstrap string            `json:"bootstrap"`
	// ClusterSettingsDigest identifies the cluster-level settings the
	// bundle was rendered under (SettingsDigest); empty for a bundle
	// rendered before it was recorded. A pin to a revision rendered under
	// other settings is refused (chooseServed).
	ClusterSettingsDigest string `json:"clusterSettingsDigest,omitempty"`
	// Revision is the number of the group's revision this bundle is; zero
	// for a bundle published before revisions were kept.
	Revision int64 `json:"revision,omitempty"`
	// PinnedRevision is set when the group is pinned (NodeGroup
	// spec.update.pinnedRevision) and this is the pinned revision.
	PinnedRevision int64 `json:"pinnedRevision,omitempty"`
	// Revisions are the group's kept revisions, oldest first; only the
	// group's published Secret carries them, not a revision's own.
	Revisions []RevisionInfo `json:"revisions,omitempty"`
	// ResourceVersion and CreationTimestamp come from the Secret.
	ResourceVersion   string      `json:"-"`
	CreationTimestamp metav1.Time `json:"-"`
	// TemplatesDigest is the template tree the bundle was rendered from,
	// from the Secret's annotation; empty for a fresh render (the
	// renderer's tree).
	TemplatesDigest string `json:"-"`

	// scripts keep the canonical copies of the scripts alive (see intern).
	scripts []unique.Handle[string]
}

// intern makes the bundle's steps and bootstrap script canonical copies,
// shared by every Published that holds the same script: most steps render
// alike for many groups, and the leader holds each bundle twice, as its
// renderer's result and as the Store's decoded Secret. Without it a
// replica kept one copy of every script per group and per form (about
// 18 MB each at 100 groups of 180 KB). A canonical copy lives while some
// Published holds its handle. bashible.sh, which differs between groups
// in a few lines only, is held as shared pieces (Script).
func (p *Published) intern() {
	p.scripts = make([]unique.Handle[string], 0, len(p.Steps)+2)
	canonical := func(s string) string {
		h := unique.Make(s)
		p.scripts = append(p.scripts, h)
		return h.Value()
	}
	p.Bootstrap = canonical(p.Bootstrap)
	// A new map: the old one may be shared (a render's result).
	steps := make(map[string]string, len(p.Steps))
	for name, script := range p.Steps {
		steps[name] = canonical(script)
	}
	p.Steps = steps
}

// Size is the number of bytes of script the group's nodes receive.
func (p *Published) Size() int {
	n := p.Bashible.Len()
	for _, s := range p.Steps {
		n += len(s)
	}
	return n
}

// gzipWriters are reused: a writer at BestCompression allocates about
// 1 MB of compressor state, which publishing every group at start turned
// into a burst of garbage the size of a hundred of them.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestCompression) // a valid level never fails
	return zw
}}

// encodeSecretData compresses a bundle for a Secret. gzip's header carries
// no time or name here, so equal bundles encode to equal bytes.
func encodeSecretData(p *Published) (map[string][]byte, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode bundle of %s: %w", p.Group, err)
	}
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
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
	p, err := decodeBundle(s)
	if err != nil {
		return nil, err
	}
	if deckhousev1.PublishedBundleSecretPrefix+p.Group != s.Name {
		return nil, fmt.Errorf("secret %s/%s does not hold a bundle of group %q", s.Namespace, s.Name, p.Group)
	}
	return p, nil
}

// decodeBundle reads the bundle a Secret holds (a group's published
// bundle, or one of its revisions) and verifies it against its checksum.
func decodeBundle(s *corev1.Secret) (*Published, error) {
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
	if p.Group == "" || p.Checksum == "" {
		return nil, fmt.Errorf("secret %s/%s does not hold a bundle of group %q", s.Namespace, s.Name, p.Group)
	}
	// Serve only what the checksum describes: an edited Secret is refused
	// (and the leader rewrites it) rather than served under a false checksum.
	if sum := templates.Checksum(p.Bashible.String(), p.Steps); sum != p.Checksum {
		return nil, fmt.Errorf("secret %s/%s: its content does not match its checksum %s", s.Namespace, s.Name, p.Checksum)
	}
	p.ResourceVersion = s.ResourceVersion
	p.CreationTimestamp = s.CreationTimestamp
	p.TemplatesDigest = s.Annotations[bashiblev1alpha1.TemplatesDigestAnnotation]
	p.intern()
	return &p, nil
}
