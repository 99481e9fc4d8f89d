package manifests_test

import (
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
)

// TestDeploymentPolicyKnowsTheStandbyHolders: the literals the Deployments
// policy compares with (the pause image, the container, the name prefix,
// the priority class) are controllers/clusterapi's, and the priority class
// it requires is shipped; the e2e suite hack/e2e/clusterapi proves the
// whole on a real API server.
func TestDeploymentPolicyKnowsTheStandbyHolders(t *testing.T) {
	policy := readPolicy(t, "policies/node-manager-controller-deployments.yaml")
	var image string
	for _, v := range policy.Spec.Variables {
		if v.Name == "standbyHolderImage" {
			image = v.Expression
		}
	}
	if image != "'"+deckhousev1.StandbyHolderImage+"'" && image != strconv.Quote(deckhousev1.StandbyHolderImage) {
		t.Errorf("the policy's standbyHolderImage is %s, want deckhousev1.StandbyHolderImage %q", image, deckhousev1.StandbyHolderImage)
	}
	var validations string
	for _, v := range policy.Spec.Validations {
		validations += v.Expression
	}
	for _, lit := range []string{deckhousev1.StandbyHolderPrefix, deckhousev1.StandbyHolderContainer, deckhousev1.StandbyPriorityClass, deckhousev1.Namespace} {
		if !strings.Contains(validations, strconv.Quote(lit)) {
			t.Errorf("the policy's validations do not name %q", lit)
		}
	}
	rbac, err := manifests.FS.ReadFile(deckhousev1.NodeManagerControllerName + "/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rbac), "kind: PriorityClass\nmetadata:\n  name: "+deckhousev1.StandbyPriorityClass+"\n") {
		t.Errorf("no PriorityClass %s is shipped beside node-manager-controller's RBAC", deckhousev1.StandbyPriorityClass)
	}
}

// readPolicy reads the ValidatingAdmissionPolicy, the first document of the
// file at path below manifests/.
func readPolicy(t *testing.T, path string) admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	data, err := manifests.FS.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	policyDoc, _, _ := strings.Cut(string(data), "\n---\n")
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(policyDoc), &policy); err != nil {
		t.Fatal(err)
	}
	return policy
}
