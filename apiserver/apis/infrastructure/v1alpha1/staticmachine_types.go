package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticMachine is the infrastructure of one Cluster API Machine: Cluster API
// clones it from the group's StaticMachineTemplate, CAPS backs it with a
// StaticInstance that matches spec.labelSelector, bootstraps that host and
// reports it provisioned; when the Machine is deleted, Cluster API drains the
// Node and deletes the StaticMachine, and CAPS cleans the host (its
// finalizer) before Cluster API deletes the Node.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-static"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.spec.providerID`
// +kubebuilder:printcolumn:name="Machine",type=string,JSONPath=`.metadata.ownerReferences[?(@.kind=="Machine")].name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StaticMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is which hosts may back the machine, and which one does.
	// +required
	Spec StaticMachineSpec `json:"spec"`
	// Status is written by CAPS.
	// +optional
	Status StaticMachineStatus `json:"status,omitempty"`
}

// StaticMachineSpec is which hosts may back a machine, and which one does.
type StaticMachineSpec struct {
	// ProviderID identifies the StaticInstance backing the machine; CAPS
	// sets it when it picks one, and the host's kubelet registers its Node
	// with the same providerID (read from /var/lib/bashible/node-spec-provider-id).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`
	// LabelSelector selects the StaticInstances that may back the machine
	// (the NodeGroup's staticInstances.labelSelector).
	// +optional
	// +structType=atomic
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// StaticMachineStatus is a machine's observed state.
type StaticMachineStatus struct {
	// Ready is Deckhouse's (Cluster API v1beta1 contract) flag that the
	// machine is provisioned; kept equal to initialization.provisioned.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// Initialization is the Cluster API v1beta2 contract: when
	// initialization.provisioned turns true, Cluster API copies
	// spec.providerID and status.addresses to the Machine.
	// +optional
	Initialization StaticMachineInitializationStatus `json:"initialization,omitempty,omitzero"`
	// Addresses of the host, copied from its Node.
	// +optional
	// +listType=atomic
	Addresses []MachineAddress `json:"addresses,omitempty"`
	// FailureReason is a terminal problem, for machines to read.
	// +optional
	FailureReason *string `json:"failureReason,omitempty"`
	// FailureMessage is a terminal problem, for people to read.
	// +optional
	FailureMessage *string `json:"failureMessage,omitempty"`
	// Conditions of the machine; a Ready condition is mirrored into the
	// Machine's InfrastructureReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StaticMachineInitializationStatus is the Cluster API v1beta2 contract of an
// infrastructure machine.
// +kubebuilder:validation:MinProperties=1
type StaticMachineInitializationStatus struct {
	// Provisioned is true once the host is bootstrapped and its Node joined.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// MachineAddressType is the kind of a machine address, as in Cluster API.
// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
type MachineAddressType string

// MachineAddress is one address of a machine, as in Cluster API.
type MachineAddress struct {
	// Type is Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS.
	// +required
	Type MachineAddressType `json:"type"`
	// Address is the address itself.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address"`
}

// StaticMachineList is a list of StaticMachines.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type StaticMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StaticMachine `json:"items"`
}
