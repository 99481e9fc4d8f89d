package drain

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/node-manager/node-manager/controllers/nodes"
)

// maxReason bounds the drain-failed annotation.
const maxReason = 1024

// Source is who asked for the drain (the draining annotation's value; empty
// means node-manager on behalf of an update).
func Source(n *corev1.Node) string {
	if v := n.Annotations[nodes.Draining]; v != "" {
		return v
	}
	return nodes.DrainSourceBashible
}

// Succeeded is the change recorded when every pod has left the node: the
// request is answered with drained=<source> and any earlier failure is gone.
func Succeeded(n *corev1.Node) *nodes.Change {
	return (&nodes.Change{}).Set(nodes.Drained, Source(n)).Remove(n, nodes.Draining, nodes.DrainFailed)
}

// Failed is the change recorded when a drain attempt gave up: the request
// stays (so it is retried) and the reason is shown; drained is never set.
func Failed(n *corev1.Node, reason string) *nodes.Change {
	if len(reason) > maxReason {
		reason = reason[:maxReason-3] + "..."
	}
	c := &nodes.Change{}
	if n.Annotations[nodes.DrainFailed] != reason {
		c.Set(nodes.DrainFailed, reason)
	}
	return c
}

// Cordon is the change that makes the node unschedulable.
func Cordon(n *corev1.Node) *nodes.Change {
	c := &nodes.Change{}
	if !n.Spec.Unschedulable {
		c.SetUnschedulable(true)
	}
	return c
}
