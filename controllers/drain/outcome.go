package drain

import (
	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// maxReason bounds the drain-failed annotation.
const maxReason = 1024

// Source is who asked for the drain (the draining annotation's value; empty
// means node-manager on behalf of an update).
func Source(n *corev1.Node) string {
	if v := n.Annotations[deckhousev1.DrainingAnnotation]; v != "" {
		return v
	}
	return deckhousev1.DrainSourceBashible
}

// Succeeded is the change recorded when every pod has left the node: the
// request is answered with drained=<source> and any earlier failure is gone.
func Succeeded(n *corev1.Node) *nodes.Change {
	return (&nodes.Change{}).Set(deckhousev1.DrainedAnnotation, Source(n)).Remove(n, deckhousev1.DrainingAnnotation, deckhousev1.DrainFailedAnnotation)
}

// Failed is the change recorded when a drain attempt gave up: the request
// stays (so it is retried) and the reason is shown; drained is never set.
func Failed(n *corev1.Node, reason string) *nodes.Change {
	if len(reason) > maxReason {
		reason = reason[:maxReason-3] + "..."
	}
	c := &nodes.Change{}
	if n.Annotations[deckhousev1.DrainFailedAnnotation] != reason {
		c.Set(deckhousev1.DrainFailedAnnotation, reason)
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
