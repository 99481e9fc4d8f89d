package manifests_test

import (
	"strconv"
	"strings"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencingagents"
)

// TestDaemonSetPolicyKnowsWhatTheControllerMakes: the literals the
// DaemonSet policy compares with (the agent's user, its flags, its
// environment, the image by its bare name) are those of
// controllers/fencingagents, so that a change there that the policy would
// refuse fails here, before the e2e suite (hack/e2e/fencingagent) proves
// the whole on a real API server.
func TestDaemonSetPolicyKnowsWhatTheControllerMakes(t *testing.T) {
	policy := readPolicy(t, "policies/node-manager-controller-daemonsets.yaml")
	vars := map[string]string{}
	for _, v := range policy.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	if got := strings.TrimSpace(vars["uid"]); got != strconv.Itoa(deckhousev1.FencingAgentUID) {
		t.Errorf("the policy's uid is %s, want deckhousev1.FencingAgentUID %d", got, deckhousev1.FencingAgentUID)
	}
	if got := vars["fencingAgentImage"]; got != strconv.Quote(deckhousev1.FencingAgentName) {
		t.Errorf("the policy's fencingAgentImage is %s, want %q (the bare name the release pins)", got, deckhousev1.FencingAgentName)
	}
	if got, want := vars["groupLabel"], strconv.Quote(deckhousev1.NodeGroupRestrictedLabel); got != want {
		t.Errorf("the policy's groupLabel is %s, want %s (the label the controller's DaemonSets select nodes by)", got, want)
	}
	for k := range fencingagents.NodeSelector("workers") {
		if k != deckhousev1.NodeGroupRestrictedLabel {
			t.Errorf("the controller's DaemonSets select nodes by %s, which the policy refuses (it admits %s only)", k, deckhousev1.NodeGroupRestrictedLabel)
		}
	}
	if got, want := vars["apiServer"], strconv.Quote("--api-server="+deckhousev1.NodeAPIProxyURL); got != want {
		t.Errorf("the policy's apiServer is %s, want %s (the node's local API proxy the controller passes)", got, want)
	}
	validations := ""
	for _, v := range policy.Spec.Validations {
		validations += v.Expression
	}
	for _, mode := range []string{deckhousev1.FencingModeWatchdog, deckhousev1.FencingModeNotify} {
		ds := fencingagents.DaemonSet(&deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{Fencing: &deckhousev1.FencingSpec{Mode: mode}}}, deckhousev1.Namespace, deckhousev1.FencingAgentName)
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, a := range c.Args {
				flag, _, _ := strings.Cut(a, "=")
				if !strings.Contains(vars["flags"], `"`+flag) {
					t.Errorf("%s mode: the controller passes %s, which the policy's flags do not list", mode, a)
				}
			}
			for _, e := range c.Env {
				if !strings.Contains(validations, `"`+e.Name+`"`) {
					t.Errorf("%s mode: the controller sets %s, which the policy does not admit", mode, e.Name)
				}
			}
		}
	}
}
