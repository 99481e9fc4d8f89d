package instances

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// ForNode returns the Instance that pins node name to group g: the only
// place its group label is ever set.
func ForNode(name string, g *deckhousev1.NodeGroup) *deckhousev1alpha1.Instance {
	return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{deckhousev1.NodeGroupLabel: g.Name, deckhousev1.ManagedByLabel: deckhousev1.NodeManagerControllerName},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: deckhousev1.SchemeGroupVersion.String(), Kind: "NodeGroup", Name: g.Name, UID: g.UID,
			BlockOwnerDeletion: ptr.To(false),
		}},
	}}
}

// Adoptable reports whether a Node without an Instance may get one from
// its own label: only a Node that existed before node-manager-controller
// first ran (firstRun), so before node-manager approved certificates.
func Adoptable(n *corev1.Node, firstRun time.Time) bool {
	return !firstRun.IsZero() && n.CreationTimestamp.Time.Before(firstRun)
}

// Summary derives the Instance's phase and bashible summary from the node
// and the conditions bashible reported.
func Summary(n *corev1.Node, inst *deckhousev1alpha1.Instance) (deckhousev1alpha1.InstancePhase, deckhousev1alpha1.BashibleStatus, string) {
	phase := deckhousev1alpha1.InstanceRunning
	if n.DeletionTimestamp != nil {
		phase = deckhousev1alpha1.InstanceTerminating
	}
	cs := inst.Status.Conditions
	for _, w := range []struct {
		typ     string
		summary deckhousev1alpha1.BashibleStatus
	}{{"WaitingDisruptionApproval", "WaitingDisruptionApproval"}, {"WaitingApproval", "WaitingApproval"}} {
		if c := meta.FindStatusCondition(cs, w.typ); c != nil && c.Status == metav1.ConditionTrue {
			return phase, w.summary, c.Message
		}
	}
	if c := meta.FindStatusCondition(cs, "BashibleReady"); c != nil {
		switch c.Status {
		case metav1.ConditionTrue:
			return phase, "Ready", c.Message
		case metav1.ConditionFalse:
			return phase, "Error", c.Message
		}
		return phase, "Unknown", c.Message
	}
	return phase, "Unknown", "bashible has not reported yet"
}
