package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticCluster is the infrastructure of Cluster API's Cluster "static": the
// hosts are already there, so there is nothing to create. CAPS reports it
// provisioned, after which Cluster API connects to the cluster through the
// Cluster's kubeconfig Secret (to find each Machine's Node).
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-static"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StaticCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is where the cluster's API is reached.
	// +optional
	Spec StaticClusterSpec `json:"spec,omitempty"`
	// Status is written by CAPS.
	// +optional
	Status StaticClusterStatus `json:"status,omitempty"`
}

// StaticClusterSpec is where the cluster's API is reached.
type StaticClusterSpec struct {
	// ControlPlaneEndpoint is the Kubernetes API endpoint of the cluster the
	// static hosts join. Optional: Cluster API does not need it for static hosts.
	// +optional
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty"`
}

// APIEndpoint is a reachable Kubernetes API endpoint.
type APIEndpoint struct {
	// Host is the endpoint's host name or IP address.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Host string `json:"host,omitempty"`
	// Port is the endpoint's port.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// StaticClusterStatus is the cluster infrastructure's observed state.
type StaticClusterStatus struct {
	// Ready is Deckhouse's (Cluster API v1beta1 contract) flag that the
	// infrastructure is ready; kept equal to initialization.provisioned.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// Initialization is the Cluster API v1beta2 contract: Cluster API waits
	// for initialization.provisioned before it reconciles the Cluster's Machines' Nodes.
	// +optional
	Initialization StaticClusterInitializationStatus `json:"initialization,omitempty,omitzero"`
	// FailureReason is a terminal problem, for machines to read.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
	// FailureMessage is a terminal problem, for people to read.
	// +optional
	FailureMessage string `json:"failureMessage,omitempty"`
	// Conditions of the cluster infrastructure.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StaticClusterInitializationStatus is the Cluster API v1beta2 contract of an
// infrastructure cluster.
// +kubebuilder:validation:MinProperties=1
type StaticClusterInitializationStatus struct {
	// Provisioned is true once the cluster's infrastructure is ready.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// StaticClusterList is a list of StaticClusters.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type StaticClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StaticCluster `json:"items"`
}
