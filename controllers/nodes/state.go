package nodes

import (
	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
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

// Mode is the group's disruption approval mode (Automatic by default).
func Mode(g *deckhousev1.NodeGroup) deckhousev1.ApprovalMode {
	if g.Spec.Disruptions == nil || g.Spec.Disruptions.ApprovalMode == "" {
		return deckhousev1.ApprovalAutomatic
	}
	return g.Spec.Disruptions.ApprovalMode
}

// State is the node's place in the update protocol. The most specific
// state wins: a failed drain over draining, draining over approved.
func State(n *corev1.Node, g *deckhousev1.NodeGroup, checksum string) string {
	has := func(k string) bool { return Has(n, k) }
	switch {
	case has(deckhousev1.DrainFailedAnnotation):
		return StateDrainFailed
	case has(deckhousev1.DrainingAnnotation) && has(deckhousev1.DisruptionRequiredAnnotation):
		return StateDrainingForDisruption
	case has(deckhousev1.DrainingAnnotation):
		return StateDraining
	case has(deckhousev1.RollingUpdateAnnotation):
		return StateRollingUpdate
	case has(deckhousev1.DisruptionRequiredAnnotation) && !has(deckhousev1.DisruptionApprovedAnnotation):
		if g != nil && Mode(g) == deckhousev1.ApprovalManual {
			return StateWaitingForManualDisruptionApproval
		}
		return StateWaitingForDisruptionApproval
	case has(deckhousev1.DisruptionApprovedAnnotation):
		return StateDisruptionApproved
	case has(deckhousev1.DrainedAnnotation):
		return StateDrained
	case has(deckhousev1.ApprovedAnnotation):
		return StateApproved
	case has(deckhousev1.WaitingForApprovalAnnotation):
		return StateWaitingForApproval
	}
	sum, ok := n.Annotations[deckhousev1.ConfigurationChecksumAnnotation]
	switch {
	case checksum != "" && sum == checksum:
		return StateUpToDate
	case !ok:
		return StateUpdateFailedNoConfigChecksum
	}
	return StateToBeUpdated
}
