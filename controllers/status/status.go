package status

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// Condition types this controller owns on NodeGroups.
const (
	ConditionReady                        = "Ready"
	ConditionUpdating                     = "Updating"
	ConditionWaitingForDisruptiveApproval = "WaitingForDisruptiveApproval"
	ConditionError                        = "Error"
	// ConditionRendered is bashible-apiserver's; a False one is an error of the group.
	ConditionRendered = "Rendered"
)

// Status is what the controller writes for one group.
type Status struct {
	Nodes, Ready, UpToDate int32
	KubernetesVersion      string
	Conditions             []metav1.Condition
	SummaryReady           string
	SummaryMessage         string
	// Error is the group's errors in one line (status.error), empty when
	// there are none.
	Error string
}

// Compute derives a group's status from its nodes, checksum and current
// conditions, for a deployment that runs components. Only nodes of this group are counted (Deckhouse's upToDate
// counted matching nodes of every group). A condition keeps its
// lastTransitionTime while its status stays the same.
func Compute(g *deckhousev1.NodeGroup, checksum string, ns []*corev1.Node, components Components, now metav1.Time) Status {
	var s Status
	var updating, waitingDisruption, drainFailed []string
	var oldest *version.Version
	for _, n := range ns {
		s.Nodes++
		if nodes.IsReady(n) {
			s.Ready++
		}
		if checksum != "" && n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == checksum {
			s.UpToDate++
		}
		if nodes.HasUpdateAnnotation(n) {
			updating = append(updating, n.Name)
		}
		if nodes.Has(n, deckhousev1.DisruptionRequiredAnnotation) && !nodes.Has(n, deckhousev1.DisruptionApprovedAnnotation) {
			waitingDisruption = append(waitingDisruption, n.Name)
		}
		if nodes.Has(n, deckhousev1.DrainFailedAnnotation) {
			drainFailed = append(drainFailed, n.Name)
		}
		if v, err := version.ParseGeneric(n.Status.NodeInfo.KubeletVersion); err == nil && (oldest == nil || v.LessThan(oldest)) {
			oldest = v
		}
	}
	if oldest != nil {
		s.KubernetesVersion = fmt.Sprintf("%d.%d", oldest.Major(), oldest.Minor())
	}
	slices.Sort(updating)
	slices.Sort(waitingDisruption)
	slices.Sort(drainFailed)

	ready, readyMsg := readiness(g, s)
	var errs []string
	if r := meta.FindStatusCondition(g.Status.Conditions, ConditionRendered); r != nil && r.Status == metav1.ConditionFalse {
		errs = append(errs, "the group's configuration does not render: "+r.Message)
	}
	if len(drainFailed) > 0 {
		errs = append(errs, fmt.Sprintf("drain failed on %s (see the nodes' %s)", list(drainFailed), deckhousev1.DrainFailedAnnotation))
	}

	set := func(typ string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		c := metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: g.Generation, LastTransitionTime: now}
		if old := meta.FindStatusCondition(g.Status.Conditions, typ); old != nil && old.Status == st {
			c.LastTransitionTime = old.LastTransitionTime
		}
		s.Conditions = append(s.Conditions, c)
	}
	set(ConditionReady, ready, pick(ready, "NodesReady", "NodesNotReady"), readyMsg)
	set(ConditionUpdating, len(updating) > 0, pick(len(updating) > 0, "NodesUpdating", "NoUpdates"),
		pick(len(updating) > 0, fmt.Sprintf("%d of %d nodes are updating: %s", len(updating), s.Nodes, list(updating)), "no node is updating"))
	waitMsg := "no node waits for a disruption approval"
	if len(waitingDisruption) > 0 {
		waitMsg = fmt.Sprintf("%s wait(s) for a disruption approval", list(waitingDisruption))
		if nodes.Mode(g) == deckhousev1.ApprovalManual {
			waitMsg += "; the group's approvalMode is Manual: drain the node, then kubectl annotate node <name> " + deckhousev1.DisruptionApprovedAnnotation + "="
		}
	}
	set(ConditionWaitingForDisruptiveApproval, len(waitingDisruption) > 0, pick(len(waitingDisruption) > 0, "DisruptionApprovalRequired", "NoDisruptionPending"), waitMsg)
	set(ConditionError, len(errs) > 0, pick(len(errs) > 0, "Error", "NoError"), pick(len(errs) > 0, strings.Join(errs, " | "), "no error"))
	inert, inertReason, inertMsg := inertCondition(InertFields(&g.Spec, components))
	set(ConditionInertFields, inert, inertReason, inertMsg)

	s.SummaryReady = pick(ready, "True", "False")
	if len(errs) > 0 {
		s.Error = strings.Join(errs, " | ")
		s.SummaryMessage = s.Error
	} else if !ready {
		s.SummaryMessage = readyMsg
	}
	return s
}

// readiness: every node Ready; CloudEphemeral groups need at least their
// minimum (minPerZone per zone) Ready.
func readiness(g *deckhousev1.NodeGroup, s Status) (bool, string) {
	if g.Spec.NodeType == deckhousev1.NodeTypeCloudEphemeral && g.Spec.CloudInstances != nil {
		zones := max(int32(len(g.Spec.CloudInstances.Zones)), 1)
		want := g.Spec.CloudInstances.MinPerZone * zones
		if s.Ready >= want && s.Ready == s.Nodes {
			return true, fmt.Sprintf("%d of %d nodes are Ready (minimum %d)", s.Ready, s.Nodes, want)
		}
		return false, fmt.Sprintf("%d of %d nodes are Ready (minimum %d)", s.Ready, s.Nodes, want)
	}
	return s.Ready == s.Nodes, fmt.Sprintf("%d of %d nodes are Ready", s.Ready, s.Nodes)
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

// list names at most five nodes.
func list(names []string) string {
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}
