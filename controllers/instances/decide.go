package instances

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// JoinWindow is how long after its join's CSR a Node may register and
// still be taken for what that join produced. A kubelet registers seconds
// after it has its certificate; a Node created much later is another
// registration (a Node deleted and registered again), which no join
// decides.
const JoinWindow = 10 * time.Minute

// Verdict is what happens to a Node that has no Instance.
type Verdict int

const (
	// Create creates the Instance pinning the node to Decision.Group.
	Create Verdict = iota
	// Wait creates nothing yet: the node's group is decided but the
	// NodeGroup does not exist (the node is looked at again when it does).
	Wait
	// Refuse creates nothing: node-manager cannot decide the node's group
	// safely, so the node reads nothing until a person admits it.
	Refuse
)

// Reasons, for Events on the Node and the reason label of
// node_manager_node_without_instance.
const (
	ReasonAdoptedInstance = "InstanceAdopted"
	ReasonJoinedInstance  = "InstanceFromJoin"
	ReasonNoInstance      = "NodeHasNoInstance"
	ReasonNoGroupLabel    = "NodeHasNoGroupLabel"
	ReasonGroupMissing    = "NodeGroupNotFound"
	ReasonConflictingJoin = "ConflictingJoins"
)

// Facts is what the decision needs to know about a Node without an
// Instance.
type Facts struct {
	Node *corev1.Node
	// FirstRun is the creation time of node-manager-controller's leader
	// Lease: when node-manager first ran in the cluster.
	FirstRun time.Time
	// Joins are the approved kubelet client CSRs of node-manager's
	// bootstrap tokens for this node's name that still exist
	// (kube-controller-manager deletes approved CSRs after an hour).
	Joins []Join
	// GroupExists reports whether a NodeGroup exists.
	GroupExists func(group string) bool
}

// Decision is the verdict on a Node without an Instance.
type Decision struct {
	Verdict Verdict
	// Group is the node's group (Create, Wait).
	Group string
	// Reason and Message explain the verdict in an Event on the Node.
	Reason, Message string
}

// Decide decides the group of a Node that has no Instance, only from what
// node-manager itself decided or witnessed, never from a label the kubelet
// could have written after node-manager took charge:
//
//  1. A Node created before node-manager first ran is adopted from its
//     node.deckhouse.io/group label (trust on first use: it joined before
//     node-manager approved certificates).
//  2. A Node created later is given the group of the node-manager
//     bootstrap token that obtained its kubelet certificate, read from the
//     approved CSR (whoever approved it: kube-controller-manager when its
//     auto-approval is bound to node-manager's bootstrappers, or
//     node-manager itself when the Instance it created was lost), if the
//     CSR was created at most JoinWindow before the Node. Two such joins
//     naming different groups decide nothing.
//  3. Any other Node (joined with another tool's token, with a certificate
//     made by hand, or registered again long after its join) is refused:
//     it reads nothing and the user is told how to admit it.
//
// A decided group that does not exist yet makes the node wait for it.
func Decide(f Facts) Decision {
	n := f.Node
	if Adoptable(n, f.FirstRun) {
		group := nodes.Label(n)
		if group == "" {
			return Decision{Verdict: Refuse, Reason: ReasonNoGroupLabel, Message: fmt.Sprintf(
				"node %s joined before node-manager-controller first ran (%s) and has no %s label, so node-manager does not know its group: "+
					"label it with its group to have it adopted once, or create Instance %s labelled %s=<group>",
				n.Name, stamp(f.FirstRun), deckhousev1.NodeGroupLabel, n.Name, deckhousev1.NodeGroupLabel)}
		}
		return exists(f, Decision{Verdict: Create, Group: group, Reason: ReasonAdoptedInstance, Message: fmt.Sprintf(
			"node %s joined before node-manager-controller first ran (%s); its group %s is taken from its label once and pinned in Instance %s",
			n.Name, stamp(f.FirstRun), group, n.Name)})
	}
	created := n.CreationTimestamp.Time
	var groups, csrs []string
	for _, j := range f.Joins {
		if j.Node != n.Name || j.Created.After(created) || created.Sub(j.Created) > JoinWindow {
			continue
		}
		if !slices.Contains(groups, j.Group) {
			groups = append(groups, j.Group)
		}
		csrs = append(csrs, j.CSR)
	}
	slices.Sort(groups)
	slices.Sort(csrs)
	switch len(groups) {
	case 0:
		return Decision{Verdict: Refuse, Reason: ReasonNoInstance, Message: fmt.Sprintf(
			"node %s has no Instance and registered after node-manager-controller first ran (%s) without a certificate obtained by a node-manager bootstrap token, "+
				"so it reads no bundle and its %s label %q is not trusted; let it join with its group's bootstrap token, "+
				"or create Instance %s labelled %s=<group> to admit it",
			n.Name, stamp(f.FirstRun), deckhousev1.NodeGroupLabel, nodes.Label(n), n.Name, deckhousev1.NodeGroupLabel)}
	case 1:
		return exists(f, Decision{Verdict: Create, Group: groups[0], Reason: ReasonJoinedInstance, Message: fmt.Sprintf(
			"node %s registered without an Instance; its kubelet certificate was obtained by a bootstrap token of node group %s (CSR %s), "+
				"so it is pinned to %s in Instance %s",
			n.Name, groups[0], strings.Join(csrs, ", "), groups[0], n.Name)})
	}
	return Decision{Verdict: Refuse, Reason: ReasonConflictingJoin, Message: fmt.Sprintf(
		"node %s has no Instance and bootstrap tokens of several node groups (%s) obtained certificates for it (CSRs %s), so node-manager cannot tell its group; "+
			"delete the Node, and join the machine again with one group's token, or create Instance %s labelled %s=<group> to admit it",
		n.Name, strings.Join(groups, ", "), strings.Join(csrs, ", "), n.Name, deckhousev1.NodeGroupLabel)}
}

// exists turns a Create for a group that does not exist into a Wait.
func exists(f Facts, d Decision) Decision {
	if f.GroupExists(d.Group) {
		return d
	}
	return Decision{Verdict: Wait, Group: d.Group, Reason: ReasonGroupMissing, Message: fmt.Sprintf(
		"node %s belongs to node group %s, which does not exist; its Instance is created when the group is", f.Node.Name, d.Group)}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
