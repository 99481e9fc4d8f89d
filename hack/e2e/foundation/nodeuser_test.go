package foundation

import (
	"maps"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

var nodeUsersGVR = schema.GroupVersionResource{Group: "deckhouse.io", Version: "v1", Resource: "nodeusers"}

const nodeUserKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDWXs6ivnQQ1yIwbmB4Om9p0CXUsImyNTFBYpTdnkZKl alice@laptop"

func nodeUser(name string, spec obj) *unstructured.Unstructured {
	return object("deckhouse.io/v1", "NodeUser", name, spec)
}

// goodUser is a valid spec with one field changed.
func goodUser(key string, value any) obj {
	spec := obj{"uid": 1100, "sshPublicKeys": []any{nodeUserKey}, "passwordHash": "$6$salt$hash"}
	if value == nil {
		delete(spec, key)
	} else {
		spec[key] = value
	}
	return spec
}

// TestNodeUserHostileValuesAreRefused: every NodeUser value reaches a root
// shell on the nodes of its groups, so kube-apiserver refuses what could
// break out of it or take over another account, naming the field: a path
// or newline in the name, a uid of 0 or a system user's, a newline in a
// key, an unknown key type, a hash with ':' or a newline, a group name
// with shell characters, a node group that is no name.
func TestNodeUserHostileValuesAreRefused(t *testing.T) {
	cases := []struct {
		name      string
		object    *unstructured.Unstructured
		wantField string
	}{
		{"../ in the name", nodeUser("../etc", goodUser("uid", 1100)), "metadata.name"},
		{"a dot in the name", nodeUser("a.b", goodUser("uid", 1100)), "metadata.name"},
		{"a name starting with a digit", nodeUser("1alice", goodUser("uid", 1100)), "metadata.name"},
		{"a name over 32 characters", nodeUser(strings.Repeat("a", 33), goodUser("uid", 1100)), "metadata.name"},
		{"uid 0", nodeUser("root-again", goodUser("uid", 0)), "spec.uid"},
		{"uid 1000 (a system or distribution user)", nodeUser("low", goodUser("uid", 1000)), "spec.uid"},
		{"uid 65534 (nobody)", nodeUser("nobody-again", goodUser("uid", 65534)), "spec.uid"},
		{"a newline in a key", nodeUser("nl-key", goodUser("sshPublicKeys", []any{nodeUserKey + "\nssh-rsa AAAA mallory"})), "spec.sshPublicKeys[0]"},
		{"a newline in the deprecated key", nodeUser("nl-old-key", goodUser("sshPublicKeys", nil)), "spec"},
		{"an unknown key type", nodeUser("odd-key", goodUser("sshPublicKeys", []any{"ssh-foo AAAA"})), "spec.sshPublicKeys[0]"},
		{"no key", nodeUser("no-key", goodUser("sshPublicKeys", nil)), "spec"},
		{"both key fields", nodeUser("two-keys", goodUser("sshPublicKey", nodeUserKey)), "spec"},
		{"a colon in the hash", nodeUser("colon", goodUser("passwordHash", "$6$salt$hash:0:0:")), "spec.passwordHash"},
		{"a newline in the hash", nodeUser("nl-hash", goodUser("passwordHash", "$6$salt$hash\nroot::0:0")), "spec.passwordHash"},
		{"a plain-text password", nodeUser("plain", goodUser("passwordHash", "hunter2")), "spec.passwordHash"},
		{"no hash", nodeUser("no-hash", goodUser("passwordHash", nil)), "spec.passwordHash"},
		{"shell in a group", nodeUser("group", goodUser("extraGroups", []any{"docker;reboot"})), "spec.extraGroups[0]"},
		{"a node group that is no name", nodeUser("ng", goodUser("nodeGroups", []any{"Workers"})), "spec.nodeGroups[0]"},
	}
	// The deprecated key with a newline needs both fields set the other way.
	cases[8].object = nodeUser("nl-old-key", obj{"uid": 1100, "sshPublicKey": "ssh-rsa AAAA\nssh-rsa BBBB", "passwordHash": "!"})
	cases[8].wantField = "spec.sshPublicKey"
	// At every served version: v1alpha1 (Deckhouse's older manifests) must
	// not be a way around v1's validations.
	for _, version := range []string{"v1", "v1alpha1"} {
		gvr := nodeUsersGVR.GroupResource().WithVersion(version)
		for _, tc := range cases {
			t.Run(version+"/"+tc.name, func(t *testing.T) {
				o := &unstructured.Unstructured{Object: maps.Clone(tc.object.Object)} // its ints defeat DeepCopy
				o.SetAPIVersion(gvr.GroupVersion().String())
				refusedAsInvalid(t, gvr, o, tc.wantField)
			})
		}
	}
}

// refusedAsInvalid creates o and requires kube-apiserver to refuse it as
// Invalid, naming wantField.
func refusedAsInvalid(t *testing.T, gvr schema.GroupVersionResource, o *unstructured.Unstructured, wantField string) {
	t.Helper()
	_, err := dyn.Resource(gvr).Create(framework.Context(t), o, metav1.CreateOptions{})
	if err == nil {
		_ = dyn.Resource(gvr).Delete(framework.Context(t), o.GetName(), metav1.DeleteOptions{})
		t.Fatalf("kube-apiserver accepted a hostile %s at %s", o.GetKind(), gvr.Version)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	if !strings.Contains(err.Error(), wantField) {
		t.Fatalf("the error should name %s: %v", wantField, err)
	}
}

// TestDeckhouseNodeUsersAreAccepted: the NodeUsers of Deckhouse's
// documentation (those with values, not placeholders) are stored, with
// Deckhouse's defaults (isSudoer false, nodeGroups ["*"]).
func TestDeckhouseNodeUsersAreAccepted(t *testing.T) {
	ctx := framework.Context(t)
	for _, u := range []*unstructured.Unstructured{
		// Deckhouse's usage page (deckhouse.io/v1).
		nodeUser("testuser", obj{"uid": 1001, "sshPublicKey": "ssh-rsa xxx",
			"passwordHash": "$2a$10$GAwx2h0D1jiEeBt.JECSEenGvShJbu.mOSQ/jaRk1ly9c31TcHjim", "isSudoer": true}),
		// The Russian page's, with extraGroups (there at v1alpha1; served here at v1).
		nodeUser("testuser2", obj{"uid": 1002, "sshPublicKey": "ssh-rsa xxx",
			"passwordHash": "$2a$10$GAwx2h0D1jiEeBt.JECSEenGvShJbu.mOSQ/jaRk1ly9c31TcHjim", "isSudoer": true, "extraGroups": []any{"docker"}}),
		// The CRD's own examples: keys with options, a SHA-512 hash.
		nodeUser("keys", obj{"uid": 1100, "sshPublicKeys": []any{"ssh-rsa AAABBB", `cert-authority,principals="name" ssh-rsa BBBCCC`},
			"passwordHash": "$6$rounds=5000$salt$abc./XYZ", "nodeGroups": []any{"master", "worker"}}),
	} {
		got, err := dyn.Resource(nodeUsersGVR).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", u.GetName(), err)
		}
		t.Cleanup(func() { _ = dyn.Resource(nodeUsersGVR).Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
		groups, _, _ := unstructured.NestedStringSlice(got.Object, "spec", "nodeGroups")
		sudoer, _, _ := unstructured.NestedBool(got.Object, "spec", "isSudoer")
		wantSudoer, _, _ := unstructured.NestedBool(u.Object, "spec", "isSudoer")
		if len(groups) == 0 || sudoer != wantSudoer {
			t.Errorf("%s: stored nodeGroups %v isSudoer %v", u.GetName(), groups, sudoer)
		}
		if _, set, _ := unstructured.NestedSlice(u.Object, "spec", "nodeGroups"); !set && (len(groups) != 1 || groups[0] != "*") {
			t.Errorf("%s: nodeGroups defaults to [*], got %v", u.GetName(), groups)
		}
	}
}
