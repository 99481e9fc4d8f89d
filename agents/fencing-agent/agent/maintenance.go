package agent

import (
	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// MaintenanceAnnotations put a node in maintenance, for the agent (which
// disarms) and for the fencing controller (which never fences it): an
// approved update, an approved disruption, or a person's fencing-disable.
var MaintenanceAnnotations = []string{
	deckhousev1.ApprovedAnnotation,
	deckhousev1.DisruptionApprovedAnnotation,
	deckhousev1.FencingDisableAnnotation,
}

// InMaintenance returns the first maintenance annotation node carries, or
// "" when it carries none (or is nil: a Node not yet seen).
func InMaintenance(node *corev1.Node) string {
	if node == nil {
		return ""
	}
	for _, a := range MaintenanceAnnotations {
		if _, ok := node.Annotations[a]; ok {
			return a
		}
	}
	return ""
}
