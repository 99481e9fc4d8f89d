package csrapproval

import (
	"encoding/json"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/instances"
	"github.com/node-manager/node-manager/controllers/kubeletcsr"
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
	ReasonApproved         = "NodeManagerApproved"
	ReasonNoNodeGroup      = "TokenWithoutNodeGroup"
	ReasonMalformed        = "NotAKubeletClientRequest"
	ReasonUnknownGroup     = "UnknownNodeGroup"
	ReasonNodeOfOtherGroup = "NodeOfAnotherGroup"
	ReasonNodeExists       = "NodeAlreadyRegistered"
	ReasonNameClaimed      = "NodeNameAlreadyClaimed"
	ReasonNameTombstoned   = "NodeNameOfDeletedNode"
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
	// Claim is the approved request to record on the Instance before the
	// approval (created with it, or added to one that has none); nil when
	// the Instance records this very request already.
	Claim *Claim
}

// Claim is the request node-manager approved for a node name, recorded on
// its Instance (ApprovedRequestAnnotation) until the node registers.
type Claim struct {
	// CSR is the request's name, Token the bootstrap token's id.
	CSR   string `json:"csr"`
	Token string `json:"token"`
	// Key is the sha256 fingerprint of the request's public key.
	Key string `json:"key"`
}

// ParseClaim reads an Instance's ApprovedRequestAnnotation; ok is false
// when there is none. An unreadable one is a claim by nobody's key, so it
// holds the name until a person removes it.
func ParseClaim(annotations map[string]string) (c Claim, ok bool) {
	v, ok := annotations[deckhousev1.ApprovedRequestAnnotation]
	if !ok {
		return Claim{}, false
	}
	if json.Unmarshal([]byte(v), &c) != nil || c.Key == "" {
		return Claim{CSR: "(unreadable)", Token: "(unreadable)", Key: "(unreadable)"}, true
	}
	return c, true
}

// Encode is the claim as ApprovedRequestAnnotation holds it.
func (c Claim) Encode() string {
	raw, _ := json.Marshal(c)
	return string(raw)
}

// Cluster is what the decision needs to know about the cluster.
type Cluster struct {
	// GroupExists reports whether a NodeGroup exists.
	GroupExists func(group string) bool
	// Instance is the group label and the annotations of Instance node, if
	// it exists.
	Instance func(node string) (group string, annotations map[string]string, exists bool)
	// NodeGroup is the group label of Node node, if it exists.
	NodeGroup func(node string) (group string, exists bool)
	// Tombstone is the tombstone of a node whose Instance node-manager
	// deleted recently (instances.Tombstones), if there is one.
	Tombstone func(node string) (instances.Tombstone, bool)
}

// Decide decides on a CSR. It approves a kubelet client certificate asked
// for by a node-manager bootstrap token of group G only for a node that is
// not another group's (no Instance of another group, no Node labelled with
// another group, no other group's node of that name deleted within
// instances.TombstoneTTL), has not registered yet (no Node of that name),
// and whose name no other request holds (the Instance records the request
// node-manager approved for it: another key is refused until the node
// registered or a person removed the record). It denies a node-manager
// bootstrapper's CSR that is not a well-formed kubelet client request,
// and ignores every other CSR.
func Decide(csr *certificatesv1.CertificateSigningRequest, c Cluster) Decision {
	if decided(csr) || !kubeletcsr.FromBootstrapper(csr) {
		return Decision{Verdict: Ignore}
	}
	token := kubeletcsr.Token(csr)
	group, err := deckhousev1.TokenGroup(csr.Spec.Groups)
	if err != nil {
		return deny(ReasonNoNodeGroup, "", "", "bootstrap token %s: %v", token, err)
	}
	node, key, err := kubeletcsr.Node(csr)
	if err != nil {
		return deny(ReasonMalformed, "", group, "bootstrap token %s of node group %s asked for a certificate that is not a kubelet client certificate: %v", token, group, err)
	}
	if !c.GroupExists(group) {
		return deny(ReasonUnknownGroup, node, group, "bootstrap token %s names node group %s, which does not exist", token, group)
	}
	pinned, annotations, hasInstance := c.Instance(node)
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
	claim := &Claim{CSR: csr.Name, Token: token, Key: key}
	if hasInstance {
		if first, ok := ParseClaim(annotations); ok {
			if first.Key != key {
				return claimed(node, group, token, first)
			}
			claim = nil // the same kubelet asking again, with its key
		}
		return Decision{Verdict: Approve, Reason: ReasonApproved, Node: node, Group: group, Claim: claim,
			Message: fmt.Sprintf("node-manager approved the kubelet client certificate of node %s of node group %s (bootstrap token %s, key %s; its Instance exists)", node, group, token, key)}
	}
	if ts, ok := c.Tombstone(node); ok && ts.Group != group {
		return deny(ReasonNameTombstoned, node, group,
			"node %s of node group %q was deleted at %s (removed or fenced); until %s only a bootstrap token of %q may obtain a certificate under its name, not one of node group %s. "+
				"If the name is to go to another group sooner, remove key %s from ConfigMap %s/%s",
			node, ts.Group, ts.DeletedAt.UTC().Format(time.RFC3339), ts.DeletedAt.Add(instances.TombstoneTTL).UTC().Format(time.RFC3339), ts.Group, group,
			node, deckhousev1.Namespace, deckhousev1.NodeNameTombstonesConfigMap)
	}
	return Decision{Verdict: Approve, Reason: ReasonApproved, Node: node, Group: group, CreateInstance: true, Claim: claim,
		Message: fmt.Sprintf("node-manager approved the kubelet client certificate of node %s of node group %s (bootstrap token %s, key %s) and created its Instance", node, group, token, key)}
}

// claimed denies a second request for a name whose Instance holds the
// first, naming it.
func claimed(node, group, token string, first Claim) Decision {
	return deny(ReasonNameClaimed, node, group,
		"node %s already has an approved certificate request, CSR %s of bootstrap token %s (key %s), and has not registered with it; "+
			"a second request (bootstrap token %s) for the name is refused. If the first was not this machine's, find who holds token %s; "+
			"to let another request through, remove annotation %s from Instance %s (or delete the Instance)",
		node, first.CSR, first.Token, first.Key, token, first.Token, deckhousev1.ApprovedRequestAnnotation, node)
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
