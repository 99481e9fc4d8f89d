package csrapproval

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/node-manager/node-manager/apiserver/access"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Verdict is what the approver does with a CSR.
type Verdict int

const (
	// Ignore leaves the CSR to others: it is not a kubelet client CSR of a
	// node-manager bootstrap token, or it is decided already.
	Ignore Verdict = iota
	// Approve approves it (after creating the Instance when asked to).
	Approve
	// Deny denies it with the decision's reason and message.
	Deny
)

// Condition reasons on denied CSRs, and the one on approved ones.
const (
	ReasonApproved          = "NodeManagerApproved"
	ReasonNoNodeGroup       = "TokenWithoutNodeGroup"
	ReasonMalformed         = "NotAKubeletClientRequest"
	ReasonUnknownGroup      = "UnknownNodeGroup"
	ReasonNodeOfOtherGroup  = "NodeOfAnotherGroup"
	ReasonNodeExists        = "NodeAlreadyRegistered"
	nodeOrganization        = "system:nodes"
	kubeletClientSignerName = certificatesv1.KubeAPIServerClientKubeletSignerName
)

// Decision is the verdict on one CSR.
type Decision struct {
	Verdict Verdict
	// Reason and Message go into the Approved or Denied condition.
	Reason, Message string
	// Node and Group are the node the certificate is for and the group
	// of the token that asked.
	Node, Group string
	// CreateInstance asks for Instance <Node> labelled Group before the
	// approval: the node has none yet.
	CreateInstance bool
}

// Cluster is what the decision needs to know about the cluster.
type Cluster struct {
	// GroupExists reports whether a NodeGroup exists.
	GroupExists func(group string) bool
	// InstanceGroup is the group label of Instance node, if it exists.
	InstanceGroup func(node string) (group string, exists bool)
	// NodeGroup is the group label of Node node, if it exists.
	NodeGroup func(node string) (group string, exists bool)
}

// Decide decides on a CSR. It approves a kubelet client certificate asked
// for by a node-manager bootstrap token of group G only for a node that is
// not another group's (no Instance of another group, no Node labelled with
// another group) and has not registered yet (no Node of that name). It denies a node-manager bootstrapper's CSR that is not a
// well-formed kubelet client request, and ignores every other CSR.
func Decide(csr *certificatesv1.CertificateSigningRequest, c Cluster) Decision {
	if decided(csr) || csr.Spec.SignerName != kubeletClientSignerName ||
		!strings.HasPrefix(csr.Spec.Username, access.BootstrapUserPrefix) ||
		!slices.Contains(csr.Spec.Groups, deckhousev1.BootstrappersGroup) {
		return Decision{Verdict: Ignore}
	}
	token := strings.TrimPrefix(csr.Spec.Username, access.BootstrapUserPrefix)
	group, err := access.TokenGroup(csr.Spec.Groups)
	if err != nil {
		return deny(ReasonNoNodeGroup, "", "", "bootstrap token %s: %v", token, err)
	}
	node, err := kubeletClientNode(csr)
	if err != nil {
		return deny(ReasonMalformed, "", group, "bootstrap token %s of node group %s asked for a certificate that is not a kubelet client certificate: %v", token, group, err)
	}
	if !c.GroupExists(group) {
		return deny(ReasonUnknownGroup, node, group, "bootstrap token %s names node group %s, which does not exist", token, group)
	}
	pinned, hasInstance := c.InstanceGroup(node)
	if hasInstance && pinned != group {
		return deny(ReasonNodeOfOtherGroup, node, group,
			"node %s belongs to node group %q (its Instance), so a bootstrap token of node group %s may not obtain its certificate", node, pinned, group)
	}
	if label, ok := c.NodeGroup(node); ok {
		if label != group {
			return deny(ReasonNodeOfOtherGroup, node, group,
				"a Node %s labelled with node group %q exists, so a bootstrap token of node group %s may not obtain its certificate", node, label, group)
		}
		// A registered node renews with its own certificate; a token
		// that could obtain one for it could act as that node (and read
		// the Secrets of its pods).
		return deny(ReasonNodeExists, node, group,
			"node %s has already registered; a bootstrap token may not obtain its certificate (it renews its own). To join a reinstalled machine under this name, delete the Node first", node)
	}
	if hasInstance {
		return Decision{Verdict: Approve, Reason: ReasonApproved, Node: node, Group: group,
			Message: fmt.Sprintf("node-manager approved the kubelet client certificate of node %s of node group %s (bootstrap token %s; its Instance exists)", node, group, token)}
	}
	return Decision{Verdict: Approve, Reason: ReasonApproved, Node: node, Group: group, CreateInstance: true,
		Message: fmt.Sprintf("node-manager approved the kubelet client certificate of node %s of node group %s (bootstrap token %s) and created its Instance", node, group, token)}
}

func deny(reason, node, group, format string, args ...any) Decision {
	return Decision{Verdict: Deny, Reason: reason, Node: node, Group: group, Message: fmt.Sprintf(format, args...)}
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// kubeletClientNode checks that the CSR asks for exactly a kubelet client
// certificate (CN system:node:<name>, O system:nodes, no alternative
// names, client auth with at most digital signature and key encipherment
// besides, signed by its key) and returns the node name.
func kubeletClientNode(csr *certificatesv1.CertificateSigningRequest) (string, error) {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return "", fmt.Errorf("spec.request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("parsing spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return "", fmt.Errorf("spec.request is not signed by its key: %w", err)
	}
	node, ok := strings.CutPrefix(req.Subject.CommonName, access.NodeUserPrefix)
	if !ok || node == "" {
		return "", fmt.Errorf("common name %q is not %s<node>", req.Subject.CommonName, access.NodeUserPrefix)
	}
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return "", fmt.Errorf("node name %q: %s", node, strings.Join(errs, "; "))
	}
	if !slices.Equal(req.Subject.Organization, []string{nodeOrganization}) {
		return "", fmt.Errorf("organization %q is not exactly [%s]", req.Subject.Organization, nodeOrganization)
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 {
		return "", fmt.Errorf("a client certificate has no subject alternative names")
	}
	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageClientAuth) {
		return "", fmt.Errorf("usages %q lack %q", csr.Spec.Usages, certificatesv1.UsageClientAuth)
	}
	for _, u := range csr.Spec.Usages {
		switch u {
		case certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment:
		default:
			return "", fmt.Errorf("usage %q is not one of a kubelet client certificate", u)
		}
	}
	return node, nil
}
