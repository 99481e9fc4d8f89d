package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeGroupConfiguration is a user's own step in the bundles of the selected
// node groups: a bash script (optionally a template rendered with the same
// context as the built-in steps) run on every matching node.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=ngc,categories=deckhouse
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="NodeGroups",type=string,JSONPath=`.spec.nodeGroups`
// +kubebuilder:printcolumn:name="Bundles",type=string,JSONPath=`.spec.bundles`
// +kubebuilder:printcolumn:name="Rendered",type=string,JSONPath=`.status.conditions[?(@.type=="Rendered")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 200",message="metadata.name: must be at most 200 characters (the step file is named NNN_<name>.sh, and a file name holds 255 bytes)",reason=FieldValueInvalid
type NodeGroupConfiguration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the step and where it applies.
	// +required
	Spec NodeGroupConfigurationSpec `json:"spec"`
	// Status reports whether the step renders, written by bashible-apiserver.
	// +optional
	Status NodeGroupConfigurationStatus `json:"status,omitempty"`
}

// NodeGroupConfigurationSpec is a step and where it applies.
type NodeGroupConfigurationSpec struct {
	// Content is the step: bash, optionally with Go template actions. It
	// may hold tabs and line breaks but no other control character (no NUL,
	// no carriage return: save scripts with Unix line ends).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=524288
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'[\x00-\x08\x0b-\x1f\x7f]')`,message="content: control characters other than tab and line feed are not allowed (no NUL; no carriage return: save the script with Unix line ends)",reason=FieldValueInvalid
	Content string `json:"content"`
	// Weight orders the step among the others: the step file is named
	// after the weight padded to three digits, then the object's name (with
	// ".sh" appended unless it ends so). Steps run in byte order of their
	// names, so the weight is limited to three digits.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=999
	Weight int32 `json:"weight"`
	// NodeGroups the step applies to, by name; "*" means every group.
	// +optional
	// +kubebuilder:default={"*"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:items:MaxLength=42
	NodeGroups []string `json:"nodeGroups"`
	// Bundles (operating systems) the step applies to, such as debian,
	// ubuntu-lts or centos; "*" means every one. The node checks its own
	// OS before it runs the step.
	// +optional
	// +kubebuilder:default={"*"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:items:MaxLength=63
	Bundles []string `json:"bundles"`
}

// NodeGroupConfigurationStatus reports whether the step renders.
type NodeGroupConfigurationStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Rendered is False, with the template, line and message,
	// when the step fails to render for some group.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeGroupConfigurationList is a list of NodeGroupConfigurations.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeGroupConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeGroupConfiguration `json:"items"`
}
