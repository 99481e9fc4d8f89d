// Package kubeletcsr reads a kubelet client CertificateSigningRequest of a
// node-manager bootstrap token: who asked (the token, its node group) and
// for which node and key. The CSR approver (controllers/csrapproval)
// decides on such requests with it; the Instance controller
// (controllers/instances) reads an approved one as the evidence that a
// node joined with a group's token. Both hold a request to the same rules.
package kubeletcsr

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// NodeOrganization is the one organization of a kubelet client
// certificate.
const NodeOrganization = "system:nodes"

// FromBootstrapper says csr asks the kubelet client signer for a
// certificate on behalf of a node-manager bootstrap token (a user
// system:bootstrap:<id> in the node-manager bootstrappers' group); every
// other CSR is someone else's.
func FromBootstrapper(csr *certificatesv1.CertificateSigningRequest) bool {
	return csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName &&
		strings.HasPrefix(csr.Spec.Username, deckhousev1.BootstrapUserPrefix) &&
		slices.Contains(csr.Spec.Groups, deckhousev1.BootstrappersGroup)
}

// Token is the id of the bootstrap token that asked.
func Token(csr *certificatesv1.CertificateSigningRequest) string {
	return strings.TrimPrefix(csr.Spec.Username, deckhousev1.BootstrapUserPrefix)
}

// Node checks that csr asks for exactly a kubelet client certificate (CN
// system:node:<name> with a valid object name, O system:nodes, no
// alternative names, client auth with at most digital signature and key
// encipherment besides, signed by its key) and returns the node's name
// and the key's fingerprint (KeyFingerprint).
func Node(csr *certificatesv1.CertificateSigningRequest) (node, key string, err error) {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return "", "", fmt.Errorf("spec.request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", "", fmt.Errorf("parsing spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return "", "", fmt.Errorf("spec.request is not signed by its key: %w", err)
	}
	node, ok := strings.CutPrefix(req.Subject.CommonName, deckhousev1.NodeUserPrefix)
	if !ok || node == "" {
		return "", "", fmt.Errorf("common name %q is not %s<node>", req.Subject.CommonName, deckhousev1.NodeUserPrefix)
	}
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return "", "", fmt.Errorf("node name %q: %s", node, strings.Join(errs, "; "))
	}
	if !slices.Equal(req.Subject.Organization, []string{NodeOrganization}) {
		return "", "", fmt.Errorf("organization %q is not exactly [%s]", req.Subject.Organization, NodeOrganization)
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 {
		return "", "", fmt.Errorf("a client certificate has no subject alternative names")
	}
	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageClientAuth) {
		return "", "", fmt.Errorf("usages %q lack %q", csr.Spec.Usages, certificatesv1.UsageClientAuth)
	}
	for _, u := range csr.Spec.Usages {
		switch u {
		case certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment:
		default:
			return "", "", fmt.Errorf("usage %q is not one of a kubelet client certificate", u)
		}
	}
	return node, KeyFingerprint(req.RawSubjectPublicKeyInfo), nil
}

// KeyFingerprint is the sha256 fingerprint of a public key (its DER
// SubjectPublicKeyInfo), as the approver's claim on a name records it.
func KeyFingerprint(spki []byte) string {
	sum := sha256.Sum256(spki)
	return "sha256:" + hex.EncodeToString(sum[:])
}
