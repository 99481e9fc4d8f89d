package nodetemplate

import (
	"bytes"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
)

// templateKeys are keys to try on all three sides: node-manager's own, the
// ones Deckhouse's documentation gives users, and others.
var templateKeys = []string{
	deckhousev1.NodeGroupLabel, deckhousev1.NodeTypeLabel, deckhousev1.UninitializedTaint,
	deckhousev1.ApprovedAnnotation, deckhousev1.LastAppliedNodeTemplateAnnotation, deckhousev1.FencingEnabledLabel,
	deckhousev1.NodeDomain + "anything", deckhousev1.UpdateAnnotationPrefix + "anything", deckhousev1.NodeManagerDomain + "anything",
	"node-role.deckhouse.io/system", "node-role.deckhouse.io/frontend", "dedicated.deckhouse.io", "deckhouse.io/x",
	"static.node.deckhouse.io/x", "example.com/tier", "dedicated", deckhousev1.NodeRoleLabelPrefix + "worker",
	deckhousev1.NodeGroupRestrictedLabel, "node-restriction.kubernetes.io/dedicated",
}

// TestReservedKeysAgreeWithTheCRDAndTheWarningPolicy: the label and
// annotation keys the NodeGroup CRD refuses, and the taint keys
// manifests/policies/nodegroup-template-keys.yaml warns about, are exactly
// the keys this controller never applies (Reserved).
func TestReservedKeysAgreeWithTheCRDAndTheWarningPolicy(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("self", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("variables", cel.DynType), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	eval := func(expr string, vars map[string]any) any {
		t.Helper()
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %q: %v", expr, iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := p.Eval(vars)
		if err != nil {
			t.Fatalf("evaluate %q: %v", expr, err)
		}
		return out.Value()
	}

	crdRules := nodeTemplateRules(t)
	taintRule := policyVariable(t, "reservedTaints")
	for _, key := range templateKeys {
		for field, rule := range crdRules {
			accepted := eval(rule, map[string]any{"self": map[string]string{key: ""}})
			if accepted == Reserved(key) {
				t.Errorf("the CRD's rule on nodeTemplate.%s says accepted=%v for %q, but Reserved=%v", field, accepted, key, Reserved(key))
			}
		}
		warned := eval("("+taintRule+").size() == 1", map[string]any{"variables": map[string]any{"taintKeys": []string{key}}})
		if warned != Reserved(key) {
			t.Errorf("the warning policy warns about taint %q: %v, but Reserved=%v", key, warned, Reserved(key))
		}
	}
}

// nodeTemplateRules are the CEL rules on nodeTemplate.labels and
// nodeTemplate.annotations in the generated NodeGroup CRD.
func nodeTemplateRules(t *testing.T) map[string]string {
	t.Helper()
	data, err := manifests.FS.ReadFile("crds/deckhouse.io_nodegroups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	rules := map[string]string{}
	for _, v := range crd.Spec.Versions {
		tmpl := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["nodeTemplate"]
		for _, field := range []string{"labels", "annotations"} {
			vs := tmpl.Properties[field].XValidations
			if len(vs) != 1 {
				t.Fatalf("nodeTemplate.%s in %s has %d validation rules, want 1", field, v.Name, len(vs))
			}
			rules[field] = vs[0].Rule
		}
	}
	return rules
}

// policyVariable is the expression of a variable of the template-keys policy.
func policyVariable(t *testing.T, name string) string {
	t.Helper()
	data, err := manifests.FS.ReadFile("policies/nodegroup-template-keys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil || tm.Kind != "ValidatingAdmissionPolicy" {
			continue
		}
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.UnmarshalStrict(doc, &p); err != nil {
			t.Fatal(err)
		}
		for _, v := range p.Spec.Variables {
			if v.Name == name {
				return v.Expression
			}
		}
	}
	t.Fatalf("nodegroup-template-keys.yaml has no variable %s", name)
	return ""
}
