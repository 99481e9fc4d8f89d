package foundation

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestSSHCredentialsV1alpha1IsValidated: Deckhouse's v1alpha1
// SSHCredentials (the password in plain text) is refused where v1alpha2 is
// (no credentials, a bad user), and where only it can be: a password and
// its encoded form at once, a password v1alpha2 could not hold once
// base64-encoded (over 3072 bytes in fewer characters), a password and a
// Secret for it.
func TestSSHCredentialsV1alpha1IsValidated(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "deckhouse.io", Version: "v1alpha1", Resource: "sshcredentials"}
	creds := func(name string, spec obj) *unstructured.Unstructured {
		return object("deckhouse.io/v1alpha1", "SSHCredentials", name, spec)
	}
	for _, tc := range []struct {
		name      string
		object    *unstructured.Unstructured
		wantField string
	}{
		{"no credentials", creds("none", obj{"user": "caps"}), "privateSSHKeySecretRef"},
		{"a user with a newline", creds("user", obj{"user": "caps\nroot", "sudoPassword": "x"}), "spec.user"},
		{"sudoPassword and sudoPasswordEncoded", creds("both", obj{"user": "caps", "sudoPassword": "x", "sudoPasswordEncoded": "eA=="}), "not both"},
		{"sudoPassword and sudoPasswordSecretRef", creds("ref", obj{"user": "caps", "sudoPassword": "x", "sudoPasswordSecretRef": obj{"name": "pw"}}), "not both"},
		{"a password over 3072 bytes", creds("long", obj{"user": "caps", "sudoPassword": strings.Repeat("пароль", 300)}), "3072 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) { refusedAsInvalid(t, gvr, tc.object, tc.wantField) })
	}
}

// TestStaticInstanceV1alpha1IsValidated: a StaticInstance written at
// Deckhouse's v1alpha1 is validated as at v1alpha2: its address must be an
// IPv4 address and names credentials.
func TestStaticInstanceV1alpha1IsValidated(t *testing.T) {
	ctx := framework.Context(t)
	gvr := schema.GroupVersionResource{Group: "deckhouse.io", Version: "v1alpha1", Resource: "staticinstances"}
	host := func(name, address string) *unstructured.Unstructured {
		return object("deckhouse.io/v1alpha1", "StaticInstance", name, obj{"address": address, "credentialsRef": obj{"kind": "SSHCredentials", "name": "creds"}})
	}
	refusedAsInvalid(t, gvr, host("bad-address", "10.0.0.1; reboot"), "spec.address")
	refusedAsInvalid(t, gvr, object("deckhouse.io/v1alpha1", "StaticInstance", "no-creds", obj{"address": "10.0.0.2", "credentialsRef": obj{"kind": "SSHCredentials"}}), "credentialsRef.name")

	// The address's immutability is the same CEL transition rule at both
	// versions (TestOlderVersionsValidateAlike, manifests); a stored
	// StaticInstance read and written at v1alpha1 goes through the
	// conversion webhook, which this suite does not run (the corpus suite
	// reads objects at every version).
	_ = ctx
}
