package manifests_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/manifests"
)

// crdVersion is the schema of version of the CRD in file, with every
// description left out (versions say the same in other words).
func crdVersion(t *testing.T, file, version string) map[string]any {
	t.Helper()
	raw, err := manifests.FS.ReadFile("crds/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != version {
			continue
		}
		data, err := json.Marshal(v.Schema.OpenAPIV3Schema)
		if err != nil {
			t.Fatal(err)
		}
		var schema map[string]any
		if err := json.Unmarshal(data, &schema); err != nil {
			t.Fatal(err)
		}
		dropDescriptions(schema)
		return schema
	}
	t.Fatalf("%s serves no version %s", file, version)
	return nil
}

func dropDescriptions(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "description")
		for _, x := range v {
			dropDescriptions(x)
		}
	case []any:
		for _, x := range v {
			dropDescriptions(x)
		}
	}
}

// at is the subschema of schema at the properties path.
func at(t *testing.T, schema map[string]any, path ...string) any {
	t.Helper()
	cur := schema
	for _, p := range path {
		next, ok := cur["properties"].(map[string]any)[p].(map[string]any)
		if !ok {
			t.Fatalf("no property %s in the schema (path %v)", p, path)
		}
		cur = next
	}
	return cur
}

// TestOlderVersionsValidateAlike: a version served for Deckhouse's older
// manifests refuses what the storage version refuses (a hostile value must
// not get in through another version): the schemas of the fields they
// share are the same, validations included.
func TestOlderVersionsValidateAlike(t *testing.T) {
	// Whole objects: NodeUser v1alpha1 is v1, StaticInstance v1alpha1 is v1alpha2.
	for _, tc := range []struct{ file, older, storage string }{
		{"deckhouse.io_nodeusers.yaml", "v1alpha1", "v1"},
		{"deckhouse.io_staticinstances.yaml", "v1alpha1", "v1alpha2"},
	} {
		if older, storage := crdVersion(t, tc.file, tc.older), crdVersion(t, tc.file, tc.storage); !reflect.DeepEqual(older, storage) {
			t.Errorf("%s: %s's schema differs from %s's", tc.file, tc.older, tc.storage)
		}
	}
	// SSHCredentials: every field but the password's plain-text form.
	older, storage := crdVersion(t, "deckhouse.io_sshcredentials.yaml", "v1alpha1"), crdVersion(t, "deckhouse.io_sshcredentials.yaml", "v1alpha2")
	for _, f := range []string{"user", "privateSSHKey", "privateSSHKeySecretRef", "sudoPasswordEncoded", "sudoPasswordSecretRef", "sshPort", "sshExtraArgs"} {
		if !reflect.DeepEqual(at(t, older, "spec", f), at(t, storage, "spec", f)) {
			t.Errorf("SSHCredentials spec.%s: v1alpha1's schema differs from v1alpha2's", f)
		}
	}
	// Instance v1alpha2: node-manager's fields and the references as at v1alpha1.
	older, storage = crdVersion(t, "deckhouse.io_instances.yaml", "v1alpha2"), crdVersion(t, "deckhouse.io_instances.yaml", "v1alpha1")
	for _, f := range [][2][]string{
		{{"status", "lastRun"}, {"status", "lastRun"}},
		{{"status", "lastFailure"}, {"status", "lastFailure"}},
		{{"status", "bashibleStatus"}, {"status", "bashibleStatus"}},
		{{"status", "message"}, {"status", "message"}},
		{{"spec", "machineRef"}, {"status", "machineRef"}},
		{{"spec", "classReference"}, {"status", "classReference"}},
	} {
		if !reflect.DeepEqual(at(t, older, f[0]...), at(t, storage, f[1]...)) {
			t.Errorf("Instance v1alpha2 %s: schema differs from v1alpha1's %s", strings.Join(f[0], "."), strings.Join(f[1], "."))
		}
	}
}

// policyVersions are the versions each admission policy on a kind served
// at several versions is written for: with matchPolicy Equivalent (the
// default), kube-apiserver converts a request at another version to that
// one before the policy reads it. A policy matching "*" would read a
// request at an older version in that version's shape, where its fields
// are elsewhere or absent (v1alpha2's Instance has its references in spec),
// and let through what it exists to refuse.
var policyVersions = map[string]string{
	"instances":       "v1alpha1",
	"nodegroups":      "v1",
	"nodeusers":       "v1",
	"staticinstances": "v1alpha2",
	"sshcredentials":  "v1alpha2",
}

// TestPoliciesReadTheVersionTheyAreWrittenFor: every policy on those kinds
// names that one version, and matches equivalent requests.
func TestPoliciesReadTheVersionTheyAreWrittenFor(t *testing.T) {
	checked := 0
	err := fs.WalkDir(manifests.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		raw, err := manifests.FS.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			var policy admissionregistrationv1.ValidatingAdmissionPolicy
			if err := yaml.Unmarshal(doc, &policy); err != nil || policy.Kind != "ValidatingAdmissionPolicy" || policy.Spec.MatchConstraints == nil {
				continue
			}
			mc := policy.Spec.MatchConstraints
			if mc.MatchPolicy != nil && *mc.MatchPolicy != admissionregistrationv1.Equivalent {
				t.Errorf("%s %s: matchPolicy %s; a request at another version would not be converted", path, policy.Name, *mc.MatchPolicy)
			}
			for _, rule := range mc.ResourceRules {
				for _, r := range rule.Resources {
					want, ok := policyVersions[strings.Split(r, "/")[0]]
					if !ok {
						continue
					}
					checked++
					if !reflect.DeepEqual(rule.APIVersions, []string{want}) {
						t.Errorf("%s %s: resource %s matches apiVersions %v; want [%s], the version its expressions read", path, policy.Name, r, rule.APIVersions, want)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no policy on instances, nodeusers, staticinstances or sshcredentials found")
	}
	t.Logf("%d resource rules on kinds served at several versions name the version their policy reads", checked)
}
