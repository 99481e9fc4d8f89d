package conversion

// SSHCredentials: hub v1alpha2 (storage), spoke v1alpha1.
//
// v1alpha1's spec.sudoPassword is the password in plain text; v1alpha2's
// spec.sudoPasswordEncoded is its base64 (standard alphabet, padded).
// Going up, sudoPassword becomes sudoPasswordEncoded. Going down,
// sudoPasswordEncoded becomes sudoPassword when it is the canonical base64
// of UTF-8 text, the only values sudoPassword can hold and give back
// unchanged; any other value (not base64, unpadded, with line breaks, or
// bytes that are not UTF-8) stays in sudoPasswordEncoded, which v1alpha1
// also holds for that case. Every other field is the same at both
// versions (v1alpha1 holds node-manager's Secret references too).
//
// Losses: none, either way; one change of spelling: a sudoPasswordEncoded
// written at v1alpha1 that is the canonical base64 of text is read back at
// v1alpha1 as that text in sudoPassword (the same password). So the
// conversion-data annotation is never
// written for SSHCredentials: the password and the key never leave the
// spec they were written in (not into an annotation, where kubectl
// describe, metadata-only watches and every tool that treats metadata as
// harmless would show them), and no error message here quotes a value.

import (
	"encoding/base64"
	"errors"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime/schema"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

var sshCredentials = Kind{
	GroupKind: schema.GroupKind{Group: deckhousev1alpha2.GroupName, Kind: "SSHCredentials"},
	Hub:       deckhousev1alpha2.SchemeGroupVersion.Version,
	Spokes: map[string]Spoke{
		deckhousev1alpha1.SchemeGroupVersion.Version: {
			Up:      sshCredentialsUp,
			Down:    sshCredentialsDown,
			Restore: func(hub, saved map[string]any) error { return nil }, // v1alpha1 holds all of v1alpha2
		},
	},
}

const (
	sshPasswordField        = "sudoPassword"
	sshPasswordEncodedField = "sudoPasswordEncoded"
)

// sshCredentialsSpec is obj's spec, nil when it has none. The errors name
// the field, never its value: these are credentials.
func sshCredentialsSpec(obj map[string]any) (map[string]any, error) {
	raw, ok := obj["spec"]
	if !ok || raw == nil {
		return nil, nil
	}
	spec, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("spec is not an object")
	}
	return spec, nil
}

func sshCredentialsUp(obj map[string]any) error {
	spec, err := sshCredentialsSpec(obj)
	if err != nil || spec == nil {
		return err
	}
	raw, ok := spec[sshPasswordField]
	if !ok {
		return nil
	}
	password, ok := raw.(string)
	if !ok {
		return errors.New("spec.sudoPassword is not a string")
	}
	if _, both := spec[sshPasswordEncodedField]; both {
		return errors.New("spec.sudoPassword and spec.sudoPasswordEncoded are both set: set only sudoPassword")
	}
	spec[sshPasswordEncodedField] = base64.StdEncoding.EncodeToString([]byte(password))
	delete(spec, sshPasswordField)
	return nil
}

func sshCredentialsDown(obj map[string]any) error {
	spec, err := sshCredentialsSpec(obj)
	if err != nil || spec == nil {
		return err
	}
	raw, ok := spec[sshPasswordEncodedField]
	if !ok {
		return nil
	}
	encoded, ok := raw.(string)
	if !ok {
		return errors.New("spec.sudoPasswordEncoded is not a string")
	}
	if _, both := spec[sshPasswordField]; both {
		return errors.New("spec.sudoPassword and spec.sudoPasswordEncoded are both set")
	}
	decoded, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || !utf8.Valid(decoded) || base64.StdEncoding.EncodeToString(decoded) != encoded {
		// Not text sudoPassword could give back unchanged: keep it as it is.
		return nil
	}
	spec[sshPasswordField] = string(decoded)
	delete(spec, sshPasswordEncodedField)
	return nil
}
