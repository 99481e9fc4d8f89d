// Package nodes holds small read-only helpers over Node objects for the
// node protocol the controllers and bashible share, and Change, the one way
// the controllers patch a Node. The protocol's labels and annotations are
// fixed names (docs/development/architecture.md, "Fixed names") defined in
// apiserver/apis/deckhouse/v1/well_known.go.
package nodes

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Label returns the node's own node.deckhouse.io/group label, "" without
// one. A kubelet may rewrite it: it names the node's group only when
// node-manager decides a node's Instance (adoption) or warns that the two
// disagree; everything else asks Cache.GroupOf or Cache.InGroup.
func Label(n *corev1.Node) string { return n.Labels[deckhousev1.NodeGroupLabel] }

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
	v, ok := n.Annotations[deckhousev1.DrainedAnnotation]
	return ok && (v == "" || v == deckhousev1.DrainSourceBashible)
}

// DrainingByUs reports whether node-manager asked for the node's drain
// (for an update), as opposed to a person or another tool.
func DrainingByUs(n *corev1.Node) bool {
	v, ok := n.Annotations[deckhousev1.DrainingAnnotation]
	return ok && (v == "" || v == deckhousev1.DrainSourceBashible)
}

// HasUpdateAnnotation reports whether any update.node.deckhouse.io/
// annotation is on the node: the node is somewhere in an update.
func HasUpdateAnnotation(n *corev1.Node) bool {
	for k := range n.Annotations {
		if strings.HasPrefix(k, deckhousev1.UpdateAnnotationPrefix) && k != deckhousev1.RebootAnnotation {
			return true
		}
	}
	return false
}
