package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticMachineTemplate is what a NodeGroup's MachineDeployment clones into
// StaticMachines: node-manager-controller writes one per Static or
// CloudStatic group with staticInstances, named after the group, carrying the
// group's staticInstances.labelSelector.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:metadata:labels="cluster.x-k8s.io/provider=infrastructure-static"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StaticMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the template.
	// +required
	Spec StaticMachineTemplateSpec `json:"spec"`
}

// StaticMachineTemplateSpec holds the template.
type StaticMachineTemplateSpec struct {
	// Template is cloned into each StaticMachine.
	// +required
	Template StaticMachineTemplateResource `json:"template"`
}

// StaticMachineTemplateResource is the StaticMachine to clone: its metadata
// and spec.
type StaticMachineTemplateResource struct {
	// ObjectMeta holds labels and annotations for the cloned StaticMachines.
	// +optional
	ObjectMeta TemplateObjectMeta `json:"metadata,omitempty"`
	// Spec of the cloned StaticMachines.
	// +required
	Spec StaticMachineTemplateResourceSpec `json:"spec"`
}

// TemplateObjectMeta is the metadata Cluster API copies onto cloned objects.
type TemplateObjectMeta struct {
	// Labels for the cloned objects.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations for the cloned objects.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// StaticMachineTemplateResourceSpec is the spec of the cloned StaticMachines.
// (Only the selector: the providerID is chosen per machine by CAPS.)
type StaticMachineTemplateResourceSpec struct {
	// LabelSelector selects the StaticInstances that may back the machines.
	// +optional
	// +structType=atomic
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// StaticMachineTemplateList is a list of StaticMachineTemplates.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type StaticMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StaticMachineTemplate `json:"items"`
}
