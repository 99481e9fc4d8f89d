// Package nodes holds the node protocol the controllers and bashible share:
// the Node labels and annotations (fixed names, DESIGN.md §3), and small
// read-only helpers over Node objects.
package nodes

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Labels.
const (
	GroupLabel      = "node.deckhouse.io/group"
	TypeLabel       = "node.deckhouse.io/type"
	RoleLabelPrefix = "node-role.kubernetes.io/"
)

// Annotations of the update protocol.
const (
	ChecksumAnnotation = "node.deckhouse.io/configuration-checksum"

	UpdatePrefix       = "update.node.deckhouse.io/"
	WaitingForApproval = UpdatePrefix + "waiting-for-approval"
	Approved           = UpdatePrefix + "approved"
	DisruptionRequired = UpdatePrefix + "disruption-required"
	DisruptionApproved = UpdatePrefix + "disruption-approved"
	Draining           = UpdatePrefix + "draining"
	Drained            = UpdatePrefix + "drained"
	DrainFailed        = UpdatePrefix + "drain-failed"
	RollingUpdate      = UpdatePrefix + "rolling-update"
	Reboot             = UpdatePrefix + "reboot"
)

// DrainSourceBashible is the value of draining/drained when node-manager
// asked for the drain on behalf of an update. An empty value means the same.
const DrainSourceBashible = "bashible"

// UninitializedTaint is put on a node at registration and removed once its
// group's node template has been applied.
const UninitializedTaint = "node.deckhouse.io/uninitialized"

// Group returns the node's group, or "" for a node node-manager does not manage.
func Group(n *corev1.Node) string { return n.Labels[GroupLabel] }

// Has reports whether the node carries the annotation.
func Has(n *corev1.Node, key string) bool {
	_, ok := n.Annotations[key]
	return ok
}

// IsReady reports whether the node's Ready condition is True.
func IsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DrainedByUs reports whether the node was drained by node-manager for an
// update (so node-manager also uncordons it afterwards).
func DrainedByUs(n *corev1.Node) bool {
	v, ok := n.Annotations[Drained]
	return ok && (v == "" || v == DrainSourceBashible)
}

// DrainingByUs reports whether node-manager asked for the node's drain
// (for an update), as opposed to a person or another tool.
func DrainingByUs(n *corev1.Node) bool {
	v, ok := n.Annotations[Draining]
	return ok && (v == "" || v == DrainSourceBashible)
}

// HasUpdateAnnotation reports whether any update.node.deckhouse.io/
// annotation is on the node: the node is somewhere in an update.
func HasUpdateAnnotation(n *corev1.Node) bool {
	for k := range n.Annotations {
		if strings.HasPrefix(k, UpdatePrefix) && k != Reboot {
			return true
		}
	}
	return false
}
