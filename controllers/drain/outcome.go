package drain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

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

// Policy is the group's drainTimeoutPolicy: Delete (Deckhouse's contract)
// unless the group says Wait. A group without the automatic block (Manual
// and RollingUpdate groups, whose drains someone else asks for) gets Delete.
func Policy(g *deckhousev1.NodeGroup) deckhousev1.DrainTimeoutPolicy {
	if g != nil && g.Spec.Disruptions != nil && g.Spec.Disruptions.Automatic != nil &&
		g.Spec.Disruptions.Automatic.DrainTimeoutPolicy == deckhousev1.DrainTimeoutWait {
		return deckhousev1.DrainTimeoutWait
	}
	return deckhousev1.DrainTimeoutDelete
}

// Left is a pod still on the node when its drain's deadline passed.
type Left struct {
	// Pod is namespace/name.
	Pod string
	// Terminating: evicted or deleted already, its kubelet has not
	// finished it yet.
	Terminating bool
	// Budgets (namespace/name) select the pod; when its eviction was
	// refused, they are what refused it.
	Budgets []string
	// Refused says a PodDisruptionBudget refused the pod's last eviction.
	Refused bool
	// Err is why the last eviction failed, as the API said; empty if it
	// did not.
	Err string
}

// String says why the pod is still there, naming the budget that keeps it.
func (l Left) String() string {
	switch {
	case l.Terminating:
		return "pod " + l.Pod + " is still terminating"
	case l.Refused && len(l.Budgets) > 0:
		return "pod " + l.Pod + ": eviction refused by PodDisruptionBudget " + strings.Join(l.Budgets, ", ") + budgetDetail(l.Err)
	case l.Refused:
		return "pod " + l.Pod + ": eviction refused by a PodDisruptionBudget" + budgetDetail(l.Err)
	case l.Err != "":
		return "pod " + l.Pod + ": " + l.Err
	}
	return "pod " + l.Pod + " has not been evicted yet"
}

func budgetDetail(err string) string {
	if err == "" {
		return ""
	}
	return " (" + err + ")"
}

// AtDeadline decides what a drain does with the pods left when its deadline
// has passed: under Delete, every pod that is not terminating yet is
// deleted (the drain then waits for them like for evicted pods); under
// Wait, none is, and the drain fails and is retried, so nothing bypasses a
// PodDisruptionBudget.
func AtDeadline(policy deckhousev1.DrainTimeoutPolicy, left []Left) []Left {
	if policy == deckhousev1.DrainTimeoutWait {
		return nil
	}
	var del []Left
	for _, l := range left {
		if !l.Terminating {
			del = append(del, l)
		}
	}
	return del
}

// HeldByBudget reports whether a PodDisruptionBudget holds any of the pods
// left: what the drain-blocked metric and its alert report under Wait.
func HeldByBudget(left []Left) bool {
	for _, l := range left {
		if l.Refused {
			return true
		}
	}
	return false
}

// Why is the reason a drain reports for the pods left, sorted by pod.
func Why(left []Left) string {
	s := make([]string, 0, len(left))
	for _, l := range left {
		s = append(s, l.String())
	}
	sort.Strings(s)
	return strings.Join(s, "; ")
}

// DeletedMessage is the text of the Event recorded on the Node for a pod
// deleted at the deadline.
func DeletedMessage(l Left, timeout time.Duration) string {
	why := "it was not evicted"
	switch {
	case l.Refused && len(l.Budgets) > 0:
		why = "PodDisruptionBudget " + strings.Join(l.Budgets, ", ") + " refused its eviction" + budgetDetail(l.Err)
	case l.Refused:
		why = "a PodDisruptionBudget refused its eviction" + budgetDetail(l.Err)
	case l.Err != "":
		why = "its eviction failed: " + l.Err
	}
	return fmt.Sprintf("deleted pod %s: %s until the drain deadline of %s passed (drainTimeoutPolicy Delete; set spec.disruptions.automatic.drainTimeoutPolicy: Wait on the group to never bypass a PodDisruptionBudget)",
		l.Pod, why, timeout)
}

// Budgets lists the PodDisruptionBudgets (namespace/name) among pdbs that
// select the pod, as the Eviction API matches them: same namespace, and a
// null selector selects nothing.
func Budgets(pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []string {
	var out []string
	for _, b := range pdbs {
		if b.Namespace != pod.Namespace {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, b.Namespace+"/"+b.Name)
	}
	sort.Strings(out)
	return out
}
