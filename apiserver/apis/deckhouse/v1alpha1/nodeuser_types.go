package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// NodeUser at v1alpha1 is Deckhouse's first version of deckhouse.io/v1's
// NodeUser (the storage version). Deckhouse publishes both with the same
// spec, so this one is v1's: the same Go types, hence the same
// validations (a user name, a regular user's uid, key and hash formats,
// group names), and the versions convert one to one
// (apiserver/conversion/nodeuser.go). It also shows v1's status, which
// Deckhouse's v1alpha1 leaves out.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,categories=deckhouse
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Uid",type=number,JSONPath=`.spec.uid`,description="User ID"
// +kubebuilder:printcolumn:name="IsSudoer",type=boolean,JSONPath=`.spec.isSudoer`,description="Can user run commands as root"
// +kubebuilder:printcolumn:name="ExtraGroups",type=string,JSONPath=`.spec.extraGroups`,description="extra groups for user"
// +kubebuilder:printcolumn:name="NodeGroups",type=string,JSONPath=`.spec.nodeGroups`,description="nodegroups for user"
// +kubebuilder:printcolumn:name="Errors",type=string,JSONPath=`.status.errors`,description="Number of errors when creating a user on selected nodes"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z][-a-z0-9]*$') && self.metadata.name.size() <= 32",message="metadata.name: the user's name must be a POSIX user name of at most 32 characters: a lowercase letter, then lowercase letters, digits and '-' (regex ^[a-z][-a-z0-9]*$)",reason=FieldValueInvalid
type NodeUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the user, as at v1.
	// +required
	Spec deckhousev1.NodeUserSpec `json:"spec"`
	// Status reports, per node, why the user could not be made there.
	// +optional
	Status deckhousev1.NodeUserStatus `json:"status,omitempty"`
}

// NodeUserList is a list of NodeUsers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeUser `json:"items"`
}
