package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticControlPlane is the control plane of Cluster API's Cluster "static",
// managed outside Cluster API (node-manager's cluster already has one). It
// exists because Cluster API cordons, drains and deletes a Machine's Node only
// when the Cluster's control plane is initialized: CAPS reports it initialized
// and externally managed, so Cluster API counts no control-plane Machines and
// never scales or upgrades it (the spec has no replicas and no version).
//
// The group is infrastructure.cluster.x-k8s.io, as in Deckhouse's CAPS.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-static"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Initialized",type=boolean,JSONPath=`.status.initialization.controlPlaneInitialized`
// +kubebuilder:printcolumn:name="External",type=boolean,JSONPath=`.status.externalManagedControlPlane`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StaticControlPlane struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is empty: the control plane is not managed through Cluster API.
	// +optional
	Spec StaticControlPlaneSpec `json:"spec,omitempty"`
	// Status is written by CAPS.
	// +optional
	Status StaticControlPlaneStatus `json:"status,omitempty"`
}

// StaticControlPlaneSpec is empty on purpose: without spec.replicas and
// spec.version Cluster API neither scales the control plane nor runs its
// version preflight checks on MachineSets.
type StaticControlPlaneSpec struct{}

// StaticControlPlaneStatus is the control plane's observed state.
type StaticControlPlaneStatus struct {
	// Ready is Deckhouse's (Cluster API v1beta1 contract) flag that the
	// control plane is ready.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// Initialized is Deckhouse's (Cluster API v1beta1 contract) flag that the
	// control plane can be contacted; kept equal to
	// initialization.controlPlaneInitialized.
	// +optional
	Initialized bool `json:"initialized,omitempty"`
	// ExternalManagedControlPlane tells Cluster API that the control plane
	// has no Machines of its own.
	// +optional
	ExternalManagedControlPlane bool `json:"externalManagedControlPlane,omitempty"`
	// Initialization is the Cluster API v1beta2 contract: Cluster API drains
	// and deletes Nodes only once initialization.controlPlaneInitialized is true.
	// +optional
	Initialization StaticControlPlaneInitializationStatus `json:"initialization,omitempty,omitzero"`
	// Conditions of the control plane.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StaticControlPlaneInitializationStatus is the Cluster API v1beta2 contract
// of a control plane.
// +kubebuilder:validation:MinProperties=1
type StaticControlPlaneInitializationStatus struct {
	// ControlPlaneInitialized is true once the control plane can be contacted.
	// +optional
	ControlPlaneInitialized *bool `json:"controlPlaneInitialized,omitempty"`
}

// StaticControlPlaneList is a list of StaticControlPlanes.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type StaticControlPlaneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StaticControlPlane `json:"items"`
}
