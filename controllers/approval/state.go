package approval

import (
	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// The update states of a node, as node_group_node_status reports them
// (one-hot): the names Deckhouse's dashboards and alerts use, plus
// DrainFailed and RollingUpdate, which are reachable here.
const (
	StateUpToDate                           = "UpToDate"
	StateToBeUpdated                        = "ToBeUpdated"
	StateWaitingForApproval                 = "WaitingForApproval"
	StateApproved                           = "Approved"
	StateWaitingForDisruptionApproval       = "WaitingForDisruptionApproval"
	StateWaitingForManualDisruptionApproval = "WaitingForManualDisruptionApproval"
	StateDrainingForDisruption              = "DrainingForDisruption"
	StateDraining                           = "Draining"
	StateDrainFailed                        = "DrainFailed"
	StateDrained                            = "Drained"
	StateDisruptionApproved                 = "DisruptionApproved"
	StateRollingUpdate                      = "RollingUpdate"
	StateUpdateFailedNoConfigChecksum       = "UpdateFailedNoConfigChecksum"
)

// States lists every state, for one-hot metrics.
var States = []string{
	StateUpToDate, StateToBeUpdated, StateWaitingForApproval, StateApproved,
	StateWaitingForDisruptionApproval, StateWaitingForManualDisruptionApproval,
	StateDrainingForDisruption, StateDraining, StateDrainFailed, StateDrained,
	StateDisruptionApproved, StateRollingUpdate, StateUpdateFailedNoConfigChecksum,
}

// State is the node's place in the update protocol. The most specific
// state wins: a failed drain over draining, draining over approved.
func State(n *corev1.Node, g *deckhousev1.NodeGroup, checksum string) string {
	has := func(k string) bool { return nodes.Has(n, k) }
	switch {
	case has(nodes.DrainFailed):
		return StateDrainFailed
	case has(nodes.Draining) && has(nodes.DisruptionRequired):
		return StateDrainingForDisruption
	case has(nodes.Draining):
		return StateDraining
	case has(nodes.RollingUpdate):
		return StateRollingUpdate
	case has(nodes.DisruptionRequired) && !has(nodes.DisruptionApproved):
		if g != nil && Mode(g) == deckhousev1.ApprovalManual {
			return StateWaitingForManualDisruptionApproval
		}
		return StateWaitingForDisruptionApproval
	case has(nodes.DisruptionApproved):
		return StateDisruptionApproved
	case has(nodes.Drained):
		return StateDrained
	case has(nodes.Approved):
		return StateApproved
	case has(nodes.WaitingForApproval):
		return StateWaitingForApproval
	}
	sum, ok := n.Annotations[nodes.ChecksumAnnotation]
	switch {
	case checksum != "" && sum == checksum:
		return StateUpToDate
	case !ok:
		return StateUpdateFailedNoConfigChecksum
	}
	return StateToBeUpdated
}
