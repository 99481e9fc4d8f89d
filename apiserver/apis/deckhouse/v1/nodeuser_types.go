package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeUser is a Linux user that bashible creates, keeps and removes on the
// nodes of the selected node groups (Deckhouse's nodeusers.deckhouse.io,
// with its field names). The object's name is the user's name.
//
// Every value is validated here, as it reaches a root shell on every
// selected node: the name is a POSIX user name, the uid a regular user's,
// each SSH key one line of a known key type, the password hash a crypt(3)
// hash of one line without ':', group names POSIX group names.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:storageversion
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

	// Spec is the user.
	// +required
	Spec NodeUserSpec `json:"spec"`
	// Status reports, per node, why the user could not be made there.
	// +optional
	Status NodeUserStatus `json:"status,omitempty"`
}

// NodeUserSpec is a node user: Deckhouse's fields.
//
// +kubebuilder:validation:XValidation:rule="has(self.sshPublicKey) || has(self.sshPublicKeys)",message="either sshPublicKey or sshPublicKeys must be specified",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!(has(self.sshPublicKey) && has(self.sshPublicKeys))",message="sshPublicKey and sshPublicKeys are mutually exclusive: put every key in sshPublicKeys",reason=FieldValueForbidden
type NodeUserSpec struct {
	// UID is the user's ID on every node; users below 1001 are the
	// system's and the distribution's, so they are refused (Deckhouse's
	// minimum). Use 1100 or above to keep clear of users made by hand.
	// +required
	// +kubebuilder:validation:Minimum=1001
	// +kubebuilder:validation:Maximum=4294967294
	// +kubebuilder:validation:XValidation:rule="self != 65534",message="uid: 65534 is the user nobody",reason=FieldValueInvalid
	UID int64 `json:"uid"`
	// SSHPublicKey is one authorized SSH key (deprecated: use
	// sshPublicKeys).
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	// +kubebuilder:validation:Pattern=`^([^\x00-\x1f\x7f]* )?(ssh-ed25519|ssh-rsa|ssh-dss|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com|ssh-ed25519-cert-v01@openssh\.com|ssh-rsa-cert-v01@openssh\.com|ecdsa-sha2-nistp256-cert-v01@openssh\.com|ecdsa-sha2-nistp384-cert-v01@openssh\.com|ecdsa-sha2-nistp521-cert-v01@openssh\.com|sk-ssh-ed25519-cert-v01@openssh\.com|sk-ecdsa-sha2-nistp256-cert-v01@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\x00-\x1f\x7f]*)?$`
	SSHPublicKey string `json:"sshPublicKey,omitempty"`
	// SSHPublicKeys are the user's authorized SSH keys, each one line of
	// authorized_keys: optional options, a key type, the base64 key and an
	// optional comment.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=16384
	// +kubebuilder:validation:items:Pattern=`^([^\x00-\x1f\x7f]* )?(ssh-ed25519|ssh-rsa|ssh-dss|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com|ssh-ed25519-cert-v01@openssh\.com|ssh-rsa-cert-v01@openssh\.com|ecdsa-sha2-nistp256-cert-v01@openssh\.com|ecdsa-sha2-nistp384-cert-v01@openssh\.com|ecdsa-sha2-nistp521-cert-v01@openssh\.com|sk-ssh-ed25519-cert-v01@openssh\.com|sk-ecdsa-sha2-nistp256-cert-v01@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\x00-\x1f\x7f]*)?$`
	SSHPublicKeys []string `json:"sshPublicKeys,omitempty"`
	// PasswordHash is the user's password as /etc/shadow holds it, a
	// crypt(3) hash such as `openssl passwd -6` prints ($6$..., $y$...,
	// $2a$...); "!" or "*" (or empty) lock the password, leaving only the
	// SSH keys.
	// +required
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^(!?\$[0-9a-z]{1,6}\$[./0-9A-Za-z=,$]+|!|\*|)$`
	PasswordHash string `json:"passwordHash"`
	// IsSudoer makes the user a member of the nodeadmin group, whom the
	// sudoers drop-in lets run any command as root (with the password).
	// +optional
	// +kubebuilder:default=false
	IsSudoer bool `json:"isSudoer"`
	// ExtraGroups are further groups of the node the user is a member of,
	// such as docker; groups the node does not have are skipped.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:Pattern=`^[a-z_][-a-z0-9_]*$`
	ExtraGroups []string `json:"extraGroups,omitempty"`
	// NodeGroups the user is made on, by name; "*" means every group.
	// +optional
	// +listType=atomic
	// +kubebuilder:default={"*"}
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:items:MaxLength=42
	NodeGroups []string `json:"nodeGroups,omitempty"`
}

// NodeUserStatus reports, per node, why the user could not be made there.
type NodeUserStatus struct {
	// Errors maps a node's name to the last error making the user there.
	// +optional
	// +kubebuilder:validation:MaxProperties=10000
	// +kubebuilder:validation:additionalProperties:MaxLength=1024
	Errors map[string]string `json:"errors,omitempty"`
}

// NodeUserList is a list of NodeUsers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeUser `json:"items"`
}
