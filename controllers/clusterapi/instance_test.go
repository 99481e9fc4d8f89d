package clusterapi

import (
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

func machine(name, node, phase string) *clusterv1.Machine {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	m.Status.NodeRef.Name = node
	m.Status.Phase = phase
	m.Spec.InfrastructureRef.Name = name
	return m
}

func TestMachineOf(t *testing.T) {
	a, b := machine("worker-a", "node-1", "Running"), machine("worker-b", "node-2", "Running")
	inst := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}
	if got := MachineOf(inst, []*clusterv1.Machine{a, b}); got != b {
		t.Errorf("by nodeRef: got %v, want worker-b", got)
	}
	// A machineRef that names another node's Machine is not trusted: the
	// Machine is the one Cluster API links to the node (written by a node
	// into its own Instance, it once chose which Machine was deleted).
	inst.Status.MachineRef = MachineRef(a)
	if got := MachineOf(inst, []*clusterv1.Machine{a, b}); got != b {
		t.Errorf("a machineRef naming node-1's Machine: got %v, want node-2's worker-b", got)
	}
	// Nor one that names a Machine still without a Node (bootstrapping).
	joining := machine("worker-c", "", "Provisioning")
	inst = &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}}
	inst.Status.MachineRef = MachineRef(joining)
	if got := MachineOf(inst, []*clusterv1.Machine{a, b, joining}); got != nil {
		t.Errorf("a machineRef naming a joining Machine without a Node: got %v, want none", got)
	}
	// It counts for its own Machine that is being deleted and has lost its
	// nodeRef, so the Instance waits for the Machine to go.
	joining.DeletionTimestamp = &metav1.Time{}
	if got := MachineOf(inst, []*clusterv1.Machine{a, b, joining}); got != joining {
		t.Errorf("a machineRef naming a Machine being deleted without its nodeRef: got %v, want worker-c", got)
	}
	if got := MachineOf(&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-9"}}, []*clusterv1.Machine{a, b}); got != nil {
		t.Errorf("a node without a Machine got %v", got)
	}
}

func TestDecide(t *testing.T) {
	running := machine("worker-a", "node-1", "Running")
	provisioned := machine("worker-a", "node-1", "Provisioned")
	deleting := machine("worker-a", "node-1", "Deleting")
	deleting.DeletionTimestamp = &metav1.Time{}
	fin := []string{infrav1alpha1.InstanceMachineFinalizer}
	linkedTo := func(m *clusterv1.Machine) *deckhousev1alpha1.Instance {
		return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Finalizers: fin},
			Status: deckhousev1alpha1.InstanceStatus{MachineRef: MachineRef(m), BootstrapStatus: BootstrapStatus(m)}}
	}
	gone := linkedTo(running)
	gone.DeletionTimestamp = &metav1.Time{}
	refused := deleting.DeepCopy()
	refused.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineInfrastructureReadyCondition, Status: metav1.ConditionFalse,
		Reason: infrav1alpha1.CleanupRefusedReason, Message: "the host is a control-plane node"}}
	reported := gone.DeepCopy()
	reported.Status.LastOperation = LastOperation(refused)
	if op := reported.Status.LastOperation; op == nil || op.Type != "Delete" || !strings.Contains(op.Description, "the host is a control-plane node") {
		t.Errorf("the Instance of a Machine whose cleanup is refused says %+v", op)
	}
	for _, tc := range []struct {
		name string
		inst *deckhousev1alpha1.Instance
		m    *clusterv1.Machine
		want InstanceAction
	}{
		{"new Instance of a Machine's node", &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, running, Link},
		{"linked, unchanged", linkedTo(running), running, Nothing},
		{"linked while Provisioned, now Running", linkedTo(provisioned), running, Link},
		{"Instance deleted: delete the Machine", gone, running, DeleteMachine},
		{"Instance deleted, Machine deleting", gone, deleting, Nothing},
		{"Instance deleted, Machine deleting, its host's cleanup refused: say so", gone, refused, Link},
		{"Instance deleted, the refusal reported", reported, refused, Nothing},
		{"the refusal went: clear it", reported, deleting, Link},
		{"scaled down, the cleanup refused: say so", linkedTo(running), refused, Link},
		{"Instance deleted, Machine gone", gone, nil, Release},
		{"Machine gone under a live Instance", linkedTo(running), nil, Release},
		{"node of no Machine", &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, nil, Nothing},
	} {
		if got := Decide(tc.inst, tc.m); got != tc.want {
			t.Errorf("%s: Decide = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBootstrapStatusClearedOnceRunning(t *testing.T) {
	if bs := BootstrapStatus(machine("worker-a", "node-1", "Running")); bs != nil {
		t.Errorf("a Running Machine's Instance keeps bootstrapStatus %+v", bs)
	}
	bs := BootstrapStatus(machine("worker-a", "", "Provisioned"))
	if bs == nil || bs.Description == "" {
		t.Fatal("a Provisioned Machine's Instance has no bootstrapStatus")
	}
}

func TestLastOperationFitsTheInstanceSchema(t *testing.T) {
	m := machine("worker-a", "", "Deleting")
	m.DeletionTimestamp = &metav1.Time{}
	m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineInfrastructureReadyCondition, Status: metav1.ConditionFalse,
		Reason: infrav1alpha1.CleanupRefusedReason, Message: strings.Repeat("é", 2000)}}
	op := LastOperation(m)
	if op == nil || len(op.Description) > deckhousev1alpha1.MaxInstanceDescription || !utf8.ValidString(op.Description) {
		t.Errorf("a refusal with a long message: description of %d bytes (valid UTF-8: %v); want at most %d", len(op.Description), utf8.ValidString(op.Description), deckhousev1alpha1.MaxInstanceDescription)
	}
}
