package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SSHCredentials is how Cluster API Provider Static logs in to the hosts of
// the StaticInstances that name it: a user, and a private key, a password,
// or both (the key to log in and the password for sudo). Only
// caps-controller-manager and cluster admins may read it (RBAC in
// manifests/caps-controller-manager/rbac.yaml): it holds secrets.
//
// +genclient
// +genclient:nonNamespaced
// +resourceName=sshcredentials
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

// SSHCredentialsSpec is a login over SSH.
//
// +kubebuilder:validation:XValidation:rule="(has(self.privateSSHKey) && size(self.privateSSHKey) > 0) || (has(self.sudoPasswordEncoded) && size(self.sudoPasswordEncoded) > 0)",message="set privateSSHKey (to log in with a key) or sudoPasswordEncoded (to log in with a password), or both"
type SSHCredentialsSpec struct {
	// User is the login name. A user other than root needs sudo on the host;
	// with sudoPasswordEncoded its password is given to sudo on stdin.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_.-]*[$]?$`
	User string `json:"user"`

	// PrivateSSHKey is the private key in PEM (OpenSSH or PKCS#8), base64-encoded.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	PrivateSSHKey string `json:"privateSSHKey,omitempty"`

	// SudoPasswordEncoded is the user's password, base64-encoded: it logs
	// in when there is no key, and it is given to sudo when the user is not
	// root.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	SudoPasswordEncoded string `json:"sudoPasswordEncoded,omitempty"`

	// SSHPort is the port sshd listens on.
	// +optional
	// +kubebuilder:default=22
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	SSHPort int32 `json:"sshPort,omitempty"`

	// SSHExtraArgs are OpenSSH command-line options, as Deckhouse passes
	// them to its ssh client. This implementation speaks SSH itself and
	// understands only `-o ConnectTimeout=<seconds>` and
	// `-o ServerAliveInterval=<seconds>` (each also as `-oName=value`);
	// any other option makes the StaticInstances that use these credentials
	// go to Error with a condition naming it, rather than be silently ignored.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SSHExtraArgs string `json:"sshExtraArgs,omitempty"`
}

// SSHCredentialsList is a list of SSHCredentials.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SSHCredentialsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SSHCredentials `json:"items"`
}
