package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// Instance at v1alpha2 is the shape Deckhouse gave Instance in 1.77 (and
// stores since): the references to the Node, the machine and the instance
// class in spec, a phase, summaries and conditions in status. node-manager
// stores deckhouse.io/v1alpha1's Instance, which its controllers and
// bashible write, and converts (apiserver/conversion/instance.go); objects
// Deckhouse stored at v1alpha2 are read through the same conversion. Of
// node-manager's own fields, the bashible runs (lastRun, lastFailure) are
// here too; what v1alpha2 has no field for is listed in that file.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,categories=deckhouse
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeRef.name`
// +kubebuilder:printcolumn:name="Bashible",type=string,JSONPath=`.status.bashibleStatus`
// +kubebuilder:printcolumn:name="Failed Step",type=string,JSONPath=`.status.lastRun.failedStep`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Instance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec references the objects the instance is made of.
	// +optional
	Spec InstanceSpec `json:"spec,omitempty"`
	// Status is the instance's observed state.
	// +optional
	Status InstanceStatus `json:"status,omitempty"`
}

// InstanceSpec references the Node, the machine and the instance class of
// an instance.
type InstanceSpec struct {
	// NodeRef names the Node the machine became.
	// +optional
	NodeRef *InstanceNodeRef `json:"nodeRef,omitempty"`
	// MachineRef is the machine controller's object backing this instance.
	// +optional
	MachineRef *deckhousev1alpha1.MachineRef `json:"machineRef,omitempty"`
	// ClassReference is the instance class of a cloud machine.
	// +optional
	ClassReference *deckhousev1alpha1.InstanceClassReference `json:"classReference,omitempty"`
}

// InstanceNodeRef names a Node (empty while there is none, as Deckhouse
// writes it).
type InstanceNodeRef struct {
	// Name of the Node.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// InstancePhase is where a machine is in its life.
// +kubebuilder:validation:Enum=Pending;Provisioning;Provisioned;Running;Terminating;Unknown
type InstancePhase string

// InstancePhaseUnknown is Deckhouse's phase of an instance whose machine's
// state it cannot tell; v1alpha1 has no such phase (it leaves the phase out).
const InstancePhaseUnknown InstancePhase = "Unknown"

// InstanceStatus is an instance's observed state.
type InstanceStatus struct {
	// Phase is Pending, Provisioning, Provisioned, Running, Terminating
	// or Unknown.
	// +optional
	Phase InstancePhase `json:"phase,omitempty"`
	// MachineStatus is Deckhouse's summary of the backing machine's state.
	// node-manager does not write it (lastOperation of v1alpha1 says what
	// it has to say about the machine).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	MachineStatus string `json:"machineStatus,omitempty"`
	// BashibleStatus is Ready, WaitingApproval, WaitingDisruptionApproval, Error or Unknown.
	// +optional
	BashibleStatus deckhousev1alpha1.BashibleStatus `json:"bashibleStatus,omitempty"`
	// Message explains the bashible status.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// Conditions: BashibleReady, WaitingApproval, WaitingDisruptionApproval.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []InstanceCondition `json:"conditions,omitempty"`
	// LastRun is bashible's latest run that ran steps (node-manager's,
	// as at v1alpha1).
	// +optional
	LastRun *deckhousev1alpha1.BashibleRun `json:"lastRun,omitempty"`
	// LastFailure is bashible's latest failed run (node-manager's, as at
	// v1alpha1).
	// +optional
	LastFailure *deckhousev1alpha1.BashibleRun `json:"lastFailure,omitempty"`
}

// InstanceCondition is one condition of an instance, as Deckhouse's
// v1alpha2 spells it (reason optional, a severity).
type InstanceCondition struct {
	// Type of the condition.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Type string `json:"type"`
	// Status is True, False or Unknown.
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status metav1.ConditionStatus `json:"status"`
	// Reason is a CamelCase word for the status.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// Severity is Deckhouse's classification of a False condition
	// (node-manager does not keep it).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Severity string `json:"severity,omitempty"`
	// Message says why.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when the status last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// ObservedGeneration is the generation the condition was set for.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// InstanceList is a list of Instances.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type InstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Instance `json:"items"`
}
