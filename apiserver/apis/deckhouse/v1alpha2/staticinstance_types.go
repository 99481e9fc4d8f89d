package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticInstance is a host that Cluster API Provider Static may turn into a
// node: its address and how to log in. caps-controller-manager picks a
// Pending one whose labels match a group's staticInstances.labelSelector,
// bootstraps it over SSH (Bootstrapping), sees its Node join (Running), and
// when its machine goes, cleans it over SSH (Cleaning) and makes it Pending
// again. The label node.deckhouse.io/allow-bootstrap=false keeps it out of
// every group; the annotation static.node.deckhouse.io/skip-bootstrap-phase
// hands an already joined host over without bootstrapping it.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:storageversion
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
	// SSHCredentials, apiVersion deckhouse.io/v1alpha2; only the name is read).
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.name) && size(self.name) > 0",message="credentialsRef.name is required"
	CredentialsRef *corev1.ObjectReference `json:"credentialsRef"`
}

// StaticInstancePhase is where a host is in its life.
// +kubebuilder:validation:Enum=Error;Pending;Bootstrapping;Running;Cleaning
type StaticInstancePhase string

const (
	// StaticInstancePending is a host free to be picked by a group.
	StaticInstancePending StaticInstancePhase = "Pending"
	// StaticInstanceBootstrapping is a host being joined over SSH.
	StaticInstanceBootstrapping StaticInstancePhase = "Bootstrapping"
	// StaticInstanceRunning is a host whose Node has joined.
	StaticInstanceRunning StaticInstancePhase = "Running"
	// StaticInstanceCleaning is a host being cleaned over SSH after its machine went.
	StaticInstanceCleaning StaticInstancePhase = "Cleaning"
	// StaticInstanceError is a host caps-controller-manager cannot use (its
	// credentials are missing or wrong); the conditions say why.
	StaticInstanceError StaticInstancePhase = "Error"
)

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

// StaticInstanceCurrentStatus is a host's phase. LastUpdateTime changes
// only when the phase does: the bootstrap and cleanup timeouts count from it.
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
