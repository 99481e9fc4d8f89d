package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticInstance at v1alpha1 is Deckhouse's first version of
// deckhouse.io/v1alpha2's StaticInstance (the storage version). Deckhouse
// publishes both with the same schema, so the versions convert one to one
// (apiserver/conversion/staticinstance.go) and this one is validated as
// v1alpha2 is (a unit test compares the two schemas).
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,categories=deckhouse
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.currentStatus.phase`,description="Static instance state"
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeRef.name`,description="Node associated with this static instance"
// +kubebuilder:printcolumn:name="Machine",type=string,JSONPath=`.status.machineRef.name`,description="Static machine associated with this static instance"
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StaticInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the host.
	// +required
	Spec StaticInstanceSpec `json:"spec"`
	// Status is where the host is in its life, written by caps-controller-manager.
	// +optional
	Status StaticInstanceStatus `json:"status,omitempty"`
}

// StaticInstanceSpec is a host and its login.
type StaticInstanceSpec struct {
	// Address is the host's IPv4 address. It cannot change: a different
	// host is a different StaticInstance.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.address is immutable: create another StaticInstance for another host"
	Address string `json:"address"`

	// CredentialsRef names the SSHCredentials to log in with (kind
	// SSHCredentials; only the name is read).
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.name) && size(self.name) > 0",message="credentialsRef.name is required"
	CredentialsRef *corev1.ObjectReference `json:"credentialsRef"`
}

// StaticInstancePhase is where a host is in its life.
// +kubebuilder:validation:Enum=Error;Pending;Bootstrapping;Running;Cleaning
type StaticInstancePhase string

// StaticInstanceStatus is a host's observed state.
type StaticInstanceStatus struct {
	// MachineRef points at the StaticMachine using the host.
	// +optional
	MachineRef *corev1.ObjectReference `json:"machineRef,omitempty"`
	// NodeRef points at the Node the host became.
	// +optional
	NodeRef *corev1.ObjectReference `json:"nodeRef,omitempty"`
	// CurrentStatus is the phase and when it last changed.
	// +optional
	CurrentStatus *StaticInstanceCurrentStatus `json:"currentStatus,omitempty"`
	// Conditions: CredentialsReady, Bootstrapped, Cleaned.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StaticInstanceCurrentStatus is a host's phase.
type StaticInstanceCurrentStatus struct {
	// Phase is Pending, Bootstrapping, Running, Cleaning or Error.
	// +optional
	Phase StaticInstancePhase `json:"phase,omitempty"`
	// LastUpdateTime is when the phase last changed.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
}

// StaticInstanceList is a list of StaticInstances.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type StaticInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StaticInstance `json:"items"`
}
