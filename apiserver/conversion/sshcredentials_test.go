package conversion

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/randfill"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// sshPassword is a random password: any text, NULs, newlines and
// multi-byte runes included.
func sshPassword(c randfill.Continue) string {
	switch c.Intn(4) {
	case 0:
		return fuzzWord(c, 16)
	case 1:
		return c.String(40)
	case 2:
		return "pa:ss\n\x00word " + c.String(5)
	default:
		return strings.Repeat("пароль", 1+c.Intn(5))
	}
}

// sshEncoded is a value of v1alpha2's sudoPasswordEncoded, and whether it
// is the canonical base64 of UTF-8 text (what v1alpha1's sudoPassword holds).
func sshEncoded(c randfill.Continue) (string, bool) {
	text := sshPassword(c)
	switch c.Intn(6) {
	case 0, 1:
		return base64.StdEncoding.EncodeToString([]byte(text)), true
	case 2: // bytes that are not UTF-8
		return base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, byte(c.Intn(256))}), false
	case 3: // unpadded
		return base64.RawStdEncoding.EncodeToString([]byte(text + "xx")), len(text+"xx")%3 == 0
	case 4: // with a line break, which Go's decoder skips
		e := base64.StdEncoding.EncodeToString([]byte(text + "abcd"))
		return e[:4] + "\n" + e[4:], false
	default:
		return "not base64: " + fuzzWord(c, 8), false
	}
}

func sshUser(c randfill.Continue) string {
	return fuzzPick(c, "root", "ubuntu", "caps", "d8_user", "admin$")
}

func sshSecretRef(c randfill.Continue) *deckhousev1alpha2.SSHCredentialsSecretRef {
	if c.Intn(3) != 0 {
		return nil
	}
	return &deckhousev1alpha2.SSHCredentialsSecretRef{Name: "secret-" + strings.ToLower(fuzzWord(c, 6)), Key: fuzzPick(c, "", "password", "ssh-privatekey")}
}

// sshHubFiller makes valid v1alpha2 SSHCredentials.
func sshHubFiller() *randfill.Filler {
	return fuzzFiller(func(s *deckhousev1alpha2.SSHCredentialsSpec, c randfill.Continue) {
		*s = deckhousev1alpha2.SSHCredentialsSpec{User: sshUser(c), SSHPort: int32(1 + c.Intn(65535)), SSHExtraArgs: fuzzPick(c, "", "-o ConnectTimeout=5")}
		s.PrivateSSHKeySecretRef, s.SudoPasswordSecretRef = sshSecretRef(c), sshSecretRef(c)
		if s.PrivateSSHKeySecretRef == nil && c.Intn(2) == 0 {
			s.PrivateSSHKey = base64.StdEncoding.EncodeToString([]byte("-----BEGIN OPENSSH PRIVATE KEY-----\n" + fuzzWord(c, 30)))
		}
		if s.SudoPasswordSecretRef == nil && (c.Intn(3) != 0 || (s.PrivateSSHKey == "" && s.PrivateSSHKeySecretRef == nil)) {
			s.SudoPasswordEncoded, _ = sshEncoded(c)
		}
	})
}

// sshSpokeFiller makes valid v1alpha1 SSHCredentials.
func sshSpokeFiller() *randfill.Filler {
	return fuzzFiller(func(s *deckhousev1alpha1.SSHCredentialsSpec, c randfill.Continue) {
		*s = deckhousev1alpha1.SSHCredentialsSpec{User: sshUser(c), SSHPort: int32(1 + c.Intn(65535))}
		if c.Intn(3) == 0 {
			s.PrivateSSHKeySecretRef = &deckhousev1alpha1.SSHCredentialsSecretRef{Name: "key"}
		} else if c.Intn(2) == 0 {
			s.PrivateSSHKey = base64.StdEncoding.EncodeToString([]byte(fuzzWord(c, 30)))
		}
		switch c.Intn(4) {
		case 0:
			s.SudoPasswordSecretRef = &deckhousev1alpha1.SSHCredentialsSecretRef{Name: "password", Key: "password"}
		case 1:
			s.SudoPasswordEncoded, _ = sshEncoded(c)
		default:
			s.SudoPassword = sshPassword(c)
		}
		if s.PrivateSSHKey == "" && s.PrivateSSHKeySecretRef == nil && s.SudoPasswordSecretRef == nil && s.SudoPassword == "" && s.SudoPasswordEncoded == "" {
			s.SudoPassword = "x"
		}
	})
}

var (
	sshHubGVK   = deckhousev1alpha2.SchemeGroupVersion.WithKind("SSHCredentials")
	sshSpokeGVK = deckhousev1alpha1.SchemeGroupVersion.WithKind("SSHCredentials")
)

// TestSSHCredentialsHubRoundTrip: any valid v1alpha2 object read at
// v1alpha1 and written back is unchanged, and reading it at v1alpha1 never
// puts the password (or anything) in an annotation.
func TestSSHCredentialsHubRoundTrip(t *testing.T) {
	f := sshHubFiller()
	asText, kept := 0, 0
	for range fuzzIterations {
		typed := &deckhousev1alpha2.SSHCredentials{}
		f.Fill(typed)
		hub := fuzzObject(t, typed, sshHubGVK)
		spoke := convert(t, sshCredentials, hub, "v1alpha1")
		if hasConversionData(spoke) || len(spoke.GetAnnotations()) != len(hub.GetAnnotations()) {
			t.Fatalf("v1alpha1 object has annotations %v, the stored one %v: conversion must not copy the spec (and its secrets) into metadata", spoke.GetAnnotations(), hub.GetAnnotations())
		}
		enc := typed.Spec.SudoPasswordEncoded
		password, hasPassword, _ := unstructured.NestedString(spoke.Object, "spec", "sudoPassword")
		encoded, hasEncoded, _ := unstructured.NestedString(spoke.Object, "spec", "sudoPasswordEncoded")
		decoded, err := base64.StdEncoding.DecodeString(enc)
		switch {
		case enc == "":
			if hasPassword || hasEncoded {
				t.Fatalf("no password at v1alpha2, but v1alpha1 has %v %v", hasPassword, hasEncoded)
			}
		case err == nil && utf8.Valid(decoded) && base64.StdEncoding.EncodeToString(decoded) == enc:
			asText++
			if !hasPassword || password != string(decoded) || hasEncoded {
				t.Fatalf("sudoPasswordEncoded is the base64 of text, but v1alpha1's sudoPassword is not that text (has %v, sudoPasswordEncoded kept %v)", hasPassword, hasEncoded)
			}
		default:
			kept++
			if hasPassword || !hasEncoded || encoded != enc {
				t.Fatalf("sudoPasswordEncoded is not the canonical base64 of text: v1alpha1 must keep it as it is (sudoPassword set %v)", hasPassword)
			}
		}
		back := convert(t, sshCredentials, spoke, "v1alpha2")
		requireEqual(t, "v1alpha2 → v1alpha1 → v1alpha2", back, hub)
	}
	t.Logf("%d v1alpha2 SSHCredentials through v1alpha1 and back unchanged, none annotated; the password became v1alpha1's sudoPassword in %d, stayed sudoPasswordEncoded in %d (not canonical base64 of text)", fuzzIterations, asText, kept)
}

// TestSSHCredentialsSpokeRoundTrip: any valid v1alpha1 object stored and
// read back is unchanged, but for its one documented change: a
// sudoPasswordEncoded that is the canonical base64 of text comes back as
// that text in sudoPassword (the same password).
func TestSSHCredentialsSpokeRoundTrip(t *testing.T) {
	f := sshSpokeFiller()
	normalized := 0
	for range fuzzIterations {
		typed := &deckhousev1alpha1.SSHCredentials{}
		f.Fill(typed)
		spoke := fuzzObject(t, typed, sshSpokeGVK)
		hub := convert(t, sshCredentials, spoke, "v1alpha2")
		if _, ok, _ := unstructured.NestedFieldNoCopy(hub.Object, "spec", "sudoPassword"); ok {
			t.Fatal("v1alpha2 object has v1alpha1's sudoPassword")
		}
		if typed.Spec.SudoPassword != "" {
			if got, _, _ := unstructured.NestedString(hub.Object, "spec", "sudoPasswordEncoded"); got != base64.StdEncoding.EncodeToString([]byte(typed.Spec.SudoPassword)) {
				t.Fatal("v1alpha2's sudoPasswordEncoded is not the base64 of v1alpha1's sudoPassword")
			}
		}
		back := convert(t, sshCredentials, hub, "v1alpha1")
		want := spoke.DeepCopy()
		if enc := typed.Spec.SudoPasswordEncoded; enc != "" {
			if d, err := base64.StdEncoding.DecodeString(enc); err == nil && utf8.Valid(d) && base64.StdEncoding.EncodeToString(d) == enc {
				normalized++
				unstructured.RemoveNestedField(want.Object, "spec", "sudoPasswordEncoded")
				_ = unstructured.SetNestedField(want.Object, string(d), "spec", "sudoPassword")
			}
		}
		requireEqual(t, "v1alpha1 → v1alpha2 → v1alpha1", back, want)
	}
	t.Logf("%d v1alpha1 SSHCredentials through v1alpha2 and back: unchanged but for %d whose canonical sudoPasswordEncoded came back as sudoPassword", fuzzIterations, normalized)
}

// TestSSHCredentialsEditedAtV1alpha1: a password changed at v1alpha1 is
// the new password at v1alpha2, and nothing else changes.
func TestSSHCredentialsEditedAtV1alpha1(t *testing.T) {
	f := sshHubFiller()
	for range fuzzIterations {
		typed := &deckhousev1alpha2.SSHCredentials{}
		f.Fill(typed)
		hub := fuzzObject(t, typed, sshHubGVK)
		spoke := convert(t, sshCredentials, hub, "v1alpha1")
		password := "new " + typed.Name
		unstructured.RemoveNestedField(spoke.Object, "spec", "sudoPasswordEncoded")
		_ = unstructured.SetNestedField(spoke.Object, password, "spec", "sudoPassword")
		_ = unstructured.SetNestedField(spoke.Object, int64(2222), "spec", "sshPort")
		back := convert(t, sshCredentials, spoke, "v1alpha2")
		want := hub.DeepCopy()
		_ = unstructured.SetNestedField(want.Object, base64.StdEncoding.EncodeToString([]byte(password)), "spec", "sudoPasswordEncoded")
		_ = unstructured.SetNestedField(want.Object, int64(2222), "spec", "sshPort")
		requireEqual(t, "edited at v1alpha1", back, want)
	}
	t.Logf("%d v1alpha2 SSHCredentials edited at v1alpha1 (password, port): exactly the edit reached v1alpha2", fuzzIterations)
}

// TestSSHCredentialsErrorsQuoteNoSecret: a conversion that fails says
// which field is wrong, never its value.
func TestSSHCredentialsErrorsQuoteNoSecret(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	encoded := base64.StdEncoding.EncodeToString([]byte(secret))
	for _, tc := range []struct {
		version string
		spec    map[string]any
	}{
		{"v1alpha1", map[string]any{"user": "root", "sudoPassword": secret, "sudoPasswordEncoded": encoded}},
		{"v1alpha1", map[string]any{"user": "root", "sudoPassword": map[string]any{"v": secret}}},
		{"v1alpha2", map[string]any{"user": "root", "sudoPasswordEncoded": []any{encoded, secret}}},
		{"v1alpha2", map[string]any{"user": "root", "sudoPassword": secret, "sudoPasswordEncoded": encoded}},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": tc.spec}}
		obj.SetAPIVersion("deckhouse.io/" + tc.version)
		obj.SetKind("SSHCredentials")
		obj.SetName("creds")
		to := map[string]string{"v1alpha1": "v1alpha2", "v1alpha2": "v1alpha1"}[tc.version]
		_, err := sshCredentials.Convert(obj, to)
		if err == nil {
			t.Fatalf("%s %v: converted to %s, want an error", tc.version, tc.spec, to)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), encoded) {
			t.Errorf("the error quotes the password: %v", err)
		}
		if !strings.Contains(err.Error(), "spec.sudoPassword") || !strings.Contains(err.Error(), "creds") {
			t.Errorf("the error names neither the field nor the object: %v", err)
		}
	}
}
