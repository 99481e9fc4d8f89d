package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SSHCredentials is how Cluster API Provider Static logs in to the hosts of
// the StaticInstances that name it: a user, and a private key, a password,
// or both (the key to log in and the password for sudo). The key and the
// password are best kept in Secrets of the namespace d8-ssh-credentials
// (privateSSHKeySecretRef, sudoPasswordSecretRef): a Secret is what
// encryption at rest covers, and its value never shows in this object, its
// audit entries or its last-applied-configuration. The inline fields
// (privateSSHKey, sudoPasswordEncoded) are kept for manifests written for
// Deckhouse, with a warning at apply. Only caps-controller-manager and
// cluster admins may read SSHCredentials (RBAC in
// manifests/caps-controller-manager/rbac.yaml); a StaticInstance may name
// one only if its author may "use" it.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:storageversion
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
// +kubebuilder:validation:XValidation:rule="(has(self.privateSSHKey) && size(self.privateSSHKey) > 0) || (has(self.sudoPasswordEncoded) && size(self.sudoPasswordEncoded) > 0) || has(self.privateSSHKeySecretRef) || has(self.sudoPasswordSecretRef)",message="set privateSSHKeySecretRef (to log in with a key) or sudoPasswordSecretRef (to log in with a password), or both (or their inline forms privateSSHKey and sudoPasswordEncoded)"
// +kubebuilder:validation:XValidation:rule="!(has(self.privateSSHKey) && size(self.privateSSHKey) > 0 && has(self.privateSSHKeySecretRef))",message="set privateSSHKey or privateSSHKeySecretRef, not both"
// +kubebuilder:validation:XValidation:rule="!(has(self.sudoPasswordEncoded) && size(self.sudoPasswordEncoded) > 0 && has(self.sudoPasswordSecretRef))",message="set sudoPasswordEncoded or sudoPasswordSecretRef, not both"
type SSHCredentialsSpec struct {
	// User is the login name. A user other than root needs sudo on the host;
	// with sudoPasswordEncoded its password is given to sudo on stdin.
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
	// d8-ssh-credentials) and its key holding the private key in PEM
	// (OpenSSH or PKCS#8), as is (not base64-encoded again): a Secret of
	// type kubernetes.io/ssh-auth holds it under ssh-privatekey, the
	// default key.
	// +optional
	PrivateSSHKeySecretRef *SSHCredentialsSecretRef `json:"privateSSHKeySecretRef,omitempty"`

	// SudoPasswordEncoded is the user's password, base64-encoded: it logs
	// in when there is no key, and it is given to sudo when the user is not
	// root. Kept for Deckhouse's manifests, with a warning at apply: prefer
	// sudoPasswordSecretRef.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	SudoPasswordEncoded string `json:"sudoPasswordEncoded,omitempty"`

	// SudoPasswordSecretRef names the Secret (in the namespace
	// d8-ssh-credentials) and its key holding the user's password, as is
	// (not base64-encoded again; the default key is password, as in a
	// Secret of type kubernetes.io/basic-auth). It is used as
	// sudoPasswordEncoded is.
	// +optional
	SudoPasswordSecretRef *SSHCredentialsSecretRef `json:"sudoPasswordSecretRef,omitempty"`

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

// SSHCredentialsSecretRef is one key of a Secret in the namespace
// d8-ssh-credentials, the only namespace whose Secrets
// caps-controller-manager may read. Whoever writes the reference must be
// allowed to read the Secret (an admission policy checks it), so an
// SSHCredentials cannot lend out a Secret its author could not read.
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
