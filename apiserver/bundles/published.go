// Package bundles turns cluster state into the bundles bashible-apiserver
// serves, and keeps every replica serving the same ones.
//
// How replicas agree (and why a broken change is never rolled out half-way):
//
//  1. Every replica renders every node group from its informers (Renderer).
//  2. One replica, the leader of the Lease bashible-apiserver, publishes each
//     group's bundle as a Secret bashible-bundle-<group> in its namespace
//     (Publisher). It writes only bundles that rendered completely, and only
//     when the checksum changed. A group whose render fails keeps its
//     previous Secret: the last good bundle. The failure is reported on the
//     NodeGroupConfiguration and NodeGroup status, as an Event and a metric.
//  3. Every replica serves what the Secrets hold (Store). Objects are
//     therefore byte-identical across replicas and across restarts, and
//     their resourceVersion is the Secret's etcd resourceVersion, which
//     means the same thing on every replica, so list-then-watch works
//     whichever replica a request lands on.
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

// Names of the published Secrets.
const (
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
	return &p, nil
}
