package clusterapi

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// The decisions about an Instance whose node a Cluster API Machine backs.
// An Instance is named after its Node; Cluster API records a Machine's Node
// in status.nodeRef once the Node with the Machine's providerID registers.

// MachineOf is the Machine backing the node of Instance inst: the one
// whose status.nodeRef, Cluster API's own link (set once a Node with the
// Machine's providerID registered), is the node; nil when none. The
// Instance's machineRef counts only where it agrees with Cluster API: for
// a Machine already being deleted that has lost its nodeRef, so that the
// Instance waits for it to go. It is never trusted on its own: whoever
// could write it (once, a node in its own Instance's status) would choose
// which Machine is deleted when the Instance goes. A machineRef that names
// another Machine is corrected by the next Link.
func MachineOf(inst *deckhousev1alpha1.Instance, machines []*clusterv1.Machine) *clusterv1.Machine {
	for _, m := range machines {
		if m.Status.NodeRef.Name == inst.Name {
			return m
		}
	}
	if ref := inst.Status.MachineRef; ref != nil && ref.Kind == kindMachine {
		for _, m := range machines {
			if m.Name == ref.Name && m.Namespace == ref.Namespace && m.Status.NodeRef.Name == "" && m.DeletionTimestamp != nil {
				return m
			}
		}
	}
	return nil
}

// MachineRef is how an Instance names its Machine (as Deckhouse's do).
func MachineRef(m *clusterv1.Machine) *deckhousev1alpha1.MachineRef {
	return &deckhousev1alpha1.MachineRef{
		APIVersion: clusterv1.GroupVersion.String(), Kind: kindMachine, Name: m.Name, Namespace: m.Namespace,
	}
}

// BootstrapStatus is what the Instance says about its host's bootstrap
// while its Machine is not Running (nil once it is, as Deckhouse clears it):
// CAPS bootstraps the host over SSH, so that is where to look.
func BootstrapStatus(m *clusterv1.Machine) *deckhousev1alpha1.BootstrapStatus {
	if m.Status.Phase == string(clusterv1.MachinePhaseRunning) || m.DeletionTimestamp != nil {
		return nil
	}
	phase := m.Status.Phase
	if phase == "" {
		phase = string(clusterv1.MachinePhasePending)
	}
	return &deckhousev1alpha1.BootstrapStatus{Description: fmt.Sprintf(
		"Machine %s/%s is %s: Cluster API Provider Static bootstraps the host over SSH (see its StaticMachine %s and StaticInstance)",
		m.Namespace, m.Name, phase, m.Spec.InfrastructureRef.Name)}
}

// LastOperation is what the Instance says about its Machine's deletion
// while the infrastructure provider refuses to clean the host (CAPS's
// CleanupRefused on the StaticMachine, which Cluster API mirrors into the
// Machine's InfrastructureReady): the deletion waits, and the message says
// why and what to do. nil otherwise, so it goes once the refusal does.
func LastOperation(m *clusterv1.Machine) *deckhousev1alpha1.LastOperation {
	if m.DeletionTimestamp == nil {
		return nil
	}
	c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineInfrastructureReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1alpha1.CleanupRefusedReason {
		return nil
	}
	return &deckhousev1alpha1.LastOperation{Type: "Delete", State: "Failed", Description: truncate(fmt.Sprintf(
		"Machine %s/%s is deleted, but Cluster API Provider Static refuses to clean the host: %s", m.Namespace, m.Name, c.Message),
		deckhousev1alpha1.MaxInstanceDescription)}
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// InstanceAction is what to do about an Instance.
type InstanceAction int

const (
	// Nothing to do.
	Nothing InstanceAction = iota
	// Link: add the finalizer and write machineRef and bootstrapStatus.
	Link
	// DeleteMachine: the Instance is being deleted and its Machine still
	// exists: delete the Machine (Cluster API drains the Node, CAPS cleans
	// the host) and keep the Instance until the Machine is gone.
	DeleteMachine
	// Release: remove the finalizer, the Machine is gone.
	Release
)

// Decide says what to do about inst given its Machine m (nil when none).
func Decide(inst *deckhousev1alpha1.Instance, m *clusterv1.Machine) InstanceAction {
	held := slices.Contains(inst.Finalizers, infrav1alpha1.InstanceMachineFinalizer)
	switch {
	case inst.DeletionTimestamp != nil && held && m != nil:
		if m.DeletionTimestamp != nil {
			if !linked(inst, m) {
				return Link // what holds the deletion up, or that nothing does
			}
			return Nothing // waiting for Cluster API
		}
		return DeleteMachine
	case m == nil && held:
		return Release
	case inst.DeletionTimestamp != nil || m == nil:
		return Nothing
	case !held || !linked(inst, m):
		return Link
	}
	return Nothing
}

// linked reports whether inst already names m and says what BootstrapStatus(m) says.
func linked(inst *deckhousev1alpha1.Instance, m *clusterv1.Machine) bool {
	ref, want := inst.Status.MachineRef, MachineRef(m)
	if ref == nil || *ref != *want {
		return false
	}
	haveOp, wantOp := inst.Status.LastOperation, LastOperation(m)
	if (haveOp == nil) != (wantOp == nil) || (haveOp != nil && *haveOp != *wantOp) {
		return false
	}
	have, wantBS := inst.Status.BootstrapStatus, BootstrapStatus(m)
	if have == nil || wantBS == nil {
		return have == nil && wantBS == nil
	}
	return *have == *wantBS
}
