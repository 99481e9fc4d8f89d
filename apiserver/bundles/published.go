package bundles

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-manager/node-manager/templates"
)

// Where and under which names bundles are published.
const (
	// PublishedNamespace is the default namespace of the published bundles
	// and the leader Lease (bashible-apiserver's --bundles-namespace): only
	// bashible-apiserver's ServiceAccount may write there.
	PublishedNamespace = "d8-bashible-bundles"
	// LeaseName is the leader Lease in the published namespace.
	LeaseName = "bashible-apiserver"
	// SecretPrefix + group name is a published bundle's Secret.
	SecretPrefix = "bashible-bundle-"
	// AppLabel marks Secrets written by bashible-apiserver.
	AppLabel = "app"
	// AppLabelValue is AppLabel's value.
	AppLabelValue = "bashible-apiserver"
	// TemplatesDigestAnnotation records the template tree a bundle came from.
	TemplatesDigestAnnotation = "bashible.deckhouse.io/templates-digest"
	// bundleKey is the Secret key holding the gzipped JSON bundle.
	bundleKey = "bundle.json.gz"
	// maxBundleBytes bounds a decompressed bundle, so a corrupt Secret cannot
	// exhaust memory.
	maxBundleBytes = 64 << 20
)

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
	return map[string][]byte{bundleKey: buf.Bytes()}, nil
}

// decodeSecret reads a published bundle from its Secret.
func decodeSecret(s *corev1.Secret) (*Published, error) {
	zr, err := gzip.NewReader(bytes.NewReader(s.Data[bundleKey]))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, bundleKey, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxBundleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, bundleKey, err)
	}
	if len(raw) > maxBundleBytes {
		return nil, fmt.Errorf("secret %s/%s: bundle is larger than %d bytes", s.Namespace, s.Name, maxBundleBytes)
	}
	var p Published
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, bundleKey, err)
	}
	if p.Group == "" || SecretPrefix+p.Group != s.Name || p.Checksum == "" {
		return nil, fmt.Errorf("secret %s/%s does not hold a bundle of group %q", s.Namespace, s.Name, p.Group)
	}
	// Serve only what the checksum describes: an edited Secret is refused
	// (and the leader rewrites it) rather than served under a false checksum.
	if sum := templates.Checksum(p.Bashible, p.Steps); sum != p.Checksum {
		return nil, fmt.Errorf("secret %s/%s: its content does not match its checksum %s", s.Namespace, s.Name, p.Checksum)
	}
	p.ResourceVersion = s.ResourceVersion
	p.CreationTimestamp = s.CreationTimestamp
	p.TemplatesDigest = s.Annotations[TemplatesDigestAnnotation]
	return &p, nil
}
