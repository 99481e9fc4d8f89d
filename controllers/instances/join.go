package instances

import (
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/kubeletcsr"
)

// Join is the evidence that a node joined with one of node-manager's
// bootstrap tokens: an approved kubelet client CSR asked for by the token.
// Its group is the token's, as kube-apiserver's authenticator recorded it
// in the CSR (spec.groups), which neither the kubelet nor any Node label
// can change.
type Join struct {
	// CSR is the request's name, for messages.
	CSR string
	// Node is the node the certificate is for (CN system:node:<name>).
	Node string
	// Group is the bootstrap token's node group.
	Group string
	// Created is when the CSR was created: the node registers after it.
	Created time.Time
}

// JoinOf reads the Join a CSR records, whoever approved it: ok is false
// for anything but an approved, neither denied nor failed, kubelet client
// CSR of a node-manager bootstrap token naming one group and one node.
func JoinOf(csr *certificatesv1.CertificateSigningRequest) (Join, bool) {
	if !kubeletcsr.FromBootstrapper(csr) {
		return Join{}, false
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return Join{}, false
		}
	}
	if !approved {
		return Join{}, false
	}
	group, err := deckhousev1.TokenGroup(csr.Spec.Groups)
	if err != nil {
		return Join{}, false
	}
	// The same rules as the approver's: a request it would have refused
	// as no kubelet client request is no evidence of a join, whoever
	// approved it.
	node, _, err := kubeletcsr.Node(csr)
	if err != nil {
		return Join{}, false
	}
	return Join{CSR: csr.Name, Node: node, Group: group, Created: csr.CreationTimestamp.Time}, true
}
