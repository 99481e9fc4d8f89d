package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SSHCredentials at v1alpha1 is Deckhouse's first version of
// deckhouse.io/v1alpha2's SSHCredentials (the storage version): the same
// login, with the sudo password in plain text in sudoPassword where
// v1alpha2 has it base64-encoded in sudoPasswordEncoded. It is served so
// that manifests and objects written for it keep working; node-manager
// converts (apiserver/conversion/sshcredentials.go). It also holds
// node-manager's fields of v1alpha2 (the Secret references), and
// sudoPasswordEncoded for a stored password that is not the base64 of
// UTF-8 text (one sudoPassword cannot hold), so nothing is lost between
// the versions and no conversion copies the password anywhere else.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,categories=deckhouse,shortName=sshcred
// +kubebuilder:printcolumn:name="User",type=string,JSONPath=`.spec.user`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.sshPort`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SSHCredentials struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the login.
	// +required
	Spec SSHCredentialsSpec `json:"spec"`
}

// SSHCredentialsSpec is a login over SSH (v1alpha1).
//
// +kubebuilder:validation:XValidation:rule="(has(self.privateSSHKey) && size(self.privateSSHKey) > 0) || (has(self.sudoPassword) && size(self.sudoPassword) > 0) || (has(self.sudoPasswordEncoded) && size(self.sudoPasswordEncoded) > 0) || has(self.privateSSHKeySecretRef) || has(self.sudoPasswordSecretRef)",message="set privateSSHKeySecretRef (to log in with a key) or sudoPasswordSecretRef (to log in with a password), or both (or their inline forms privateSSHKey and sudoPassword)"
// +kubebuilder:validation:XValidation:rule="!(has(self.privateSSHKey) && size(self.privateSSHKey) > 0 && has(self.privateSSHKeySecretRef))",message="set privateSSHKey or privateSSHKeySecretRef, not both"
// +kubebuilder:validation:XValidation:rule="!(has(self.sudoPassword) && has(self.sudoPasswordEncoded))",message="set sudoPassword or sudoPasswordEncoded, not both"
// +kubebuilder:validation:XValidation:rule="!(((has(self.sudoPassword) && size(self.sudoPassword) > 0) || (has(self.sudoPasswordEncoded) && size(self.sudoPasswordEncoded) > 0)) && has(self.sudoPasswordSecretRef))",message="set sudoPassword or sudoPasswordSecretRef, not both"
type SSHCredentialsSpec struct {
	// User is the login name. A user other than root needs sudo on the host;
	// with sudoPassword its password is given to sudo on stdin.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_.-]*[$]?$`
	User string `json:"user"`

	// PrivateSSHKey is the private key in PEM (OpenSSH or PKCS#8),
	// base64-encoded. Kept for Deckhouse's manifests, with a warning at
	// apply: prefer privateSSHKeySecretRef.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	PrivateSSHKey string `json:"privateSSHKey,omitempty"`

	// PrivateSSHKeySecretRef names the Secret (in the namespace
	// d8-ssh-credentials) and its key holding the private key in PEM, as
	// v1alpha2's does.
	// +optional
	PrivateSSHKeySecretRef *SSHCredentialsSecretRef `json:"privateSSHKeySecretRef,omitempty"`

	// SudoPassword is the user's password in plain text (v1alpha2 holds it
	// base64-encoded in sudoPasswordEncoded): it logs in when there is no
	// key, and it is given to sudo when the user is not root. Kept for
	// Deckhouse's manifests, with a warning at apply: prefer
	// sudoPasswordSecretRef.
	// +optional
	// +kubebuilder:validation:MaxLength=3072
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 3072",message="sudoPassword is at most 3072 bytes (4096 once base64-encoded, v1alpha2's limit)"
	SudoPassword string `json:"sudoPassword,omitempty"`

	// SudoPasswordEncoded is v1alpha2's field, shown here only for a
	// stored password whose base64 does not decode to text sudoPassword
	// can hold (not canonical base64, or not UTF-8); set sudoPassword
	// instead.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	SudoPasswordEncoded string `json:"sudoPasswordEncoded,omitempty"`

	// SudoPasswordSecretRef names the Secret (in the namespace
	// d8-ssh-credentials) and its key holding the user's password, as
	// v1alpha2's does.
	// +optional
	SudoPasswordSecretRef *SSHCredentialsSecretRef `json:"sudoPasswordSecretRef,omitempty"`

	// SSHPort is the port sshd listens on.
	// +optional
	// +kubebuilder:default=22
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	SSHPort int32 `json:"sshPort,omitempty"`

	// SSHExtraArgs are OpenSSH command-line options, as v1alpha2's.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SSHExtraArgs string `json:"sshExtraArgs,omitempty"`
}

// SSHCredentialsSecretRef is one key of a Secret in the namespace
// d8-ssh-credentials, as v1alpha2's.
type SSHCredentialsSecretRef struct {
	// Name is the Secret's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key is the key of the Secret's data (default: ssh-privatekey for the
	// private key, password for the password).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`
}

// SSHCredentialsList is a list of SSHCredentials.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SSHCredentialsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SSHCredentials `json:"items"`
}
