package apiserver

import (
	"context"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestChecksumFollowsNodeGroupConfigurations: adding, editing and deleting
// an NGC changes the checksum of exactly the groups it selects.
func TestChecksumFollowsNodeGroupConfigurations(t *testing.T) {
	ctx := framework.Context(t)
	worker0, master0 := f.Checksum(t, "worker"), f.Checksum(t, "master")

	ngc := f.TestConfiguration(t, "worker-only.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"worker"}, Bundles: []string{"*"}, Weight: 70, Content: "echo {{ .nodeGroup.name }}\n",
	})
	waitConfigProcessed(t, ngc.Name, ngc.Generation)
	worker1 := f.WaitChecksum(t, "worker", func(s string) bool { return s != worker0 })
	if got := f.Bundle(t, "worker").Data["070_worker-only.sh"]; got != "echo worker\n" {
		t.Errorf("the new step renders %q", got)
	}
	if f.Checksum(t, "master") != master0 {
		t.Error("an NGC for worker must not change master's checksum")
	}

	ngc, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, ngc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ngc.Spec.Content = "echo edited {{ .nodeGroup.nodeType }}\n"
	ngc, err = f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, ngc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitConfigProcessed(t, ngc.Name, ngc.Generation)
	f.WaitChecksum(t, "worker", func(s string) bool { return s != worker1 && s != worker0 })
	if got := f.Bundle(t, "worker").Data["070_worker-only.sh"]; got != "echo edited Static\n" {
		t.Errorf("the edited step renders %q", got)
	}

	if err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(ctx, ngc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitChecksum(t, "worker", func(s string) bool { return s == worker0 })
	if _, ok := f.Bundle(t, "worker").Data["070_worker-only.sh"]; ok {
		t.Error("the deleted NGC's step is still served")
	}
}

// TestScalingCountersDoNotChangeTheChecksum: cloudInstances counters and
// zones are not part of what nodes receive; kubelet settings are.
func TestScalingCountersDoNotChangeTheChecksum(t *testing.T) {
	ctx := framework.Context(t)
	if _, err := f.CreateGroup(ctx, framework.NewGroup("cloud", func(ng *deckhousev1.NodeGroup) {
		ng.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
		ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{
			ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "small"},
			MinPerZone:     1, MaxPerZone: 2, Zones: []string{"a"},
		}
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1().NodeGroups().Delete(context.Background(), "cloud", metav1.DeleteOptions{})
	})
	waitGroupProcessed(t, "cloud")
	before := f.Bundle(t, "cloud")

	patch := func(p string) {
		t.Helper()
		if _, err := f.NM.DeckhouseV1().NodeGroups().Patch(ctx, "cloud", types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGroupProcessed(t, "cloud")
	}
	patch(`{"spec":{"cloudInstances":{"minPerZone":3,"maxPerZone":9,"zones":["a","b","c"],"maxSurgePerZone":2}}}`)
	after := f.Bundle(t, "cloud")
	if after.ResourceVersion != before.ResourceVersion || checksum0(after) != checksum0(before) {
		t.Errorf("scaling changed the served bundle: resourceVersion %s → %s, checksum %s → %s",
			before.ResourceVersion, after.ResourceVersion, before.Annotations, after.Annotations)
	}
	patch(`{"spec":{"kubelet":{"maxPods":42}}}`)
	sum := f.WaitChecksum(t, "cloud", func(s string) bool { return s != checksum0(before) })
	if !strings.Contains(f.Bundle(t, "cloud").Data["060_kubelet.sh"], "maxPods: 42") {
		t.Errorf("maxPods 42 should reach the kubelet step (checksum %s)", sum)
	}
}

func checksum0(b *bashiblev1alpha1.NodeGroupBundle) string {
	return b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
}

// TestBrokenConfigurationKeepsLastGoodBundles: a NodeGroupConfiguration that
// fails to render leaves every group's bundle as it was, says why (with the
// template and line) on its status, on the NodeGroup, in an Event and in a
// metric, and recovers when fixed.
func TestBrokenConfigurationKeepsLastGoodBundles(t *testing.T) {
	cases := []struct {
		name, content string
		weight        int32
		wantMsg       []string
	}{
		{"broken-parse.sh", "echo one\n{{ if }}\n", 71, []string{"NodeGroupConfiguration/broken-parse.sh, line 2", "missing value for if"}},
		{"broken-key.sh", "echo\necho\n{{ .nodeGroup.nmae }}\n", 72, []string{"line 3", `map has no entry for key "nmae"`}},
		{"broken-fail.sh", `{{ fail "this step is not ready" }}`, 73, []string{"line 1", "this step is not ready"}},
		{"kernel", "echo collide\n", 15, []string{"015_kernel.sh is a built-in step"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := framework.Context(t)
			worker0, master0 := f.Bundle(t, "worker"), f.Bundle(t, "master")
			errorsBefore := renderErrors(t, "worker")

			ngc := f.TestConfiguration(t, tc.name, deckhousev1alpha1.NodeGroupConfigurationSpec{
				NodeGroups: []string{"*"}, Bundles: []string{"*"}, Weight: tc.weight, Content: tc.content,
			})
			cond := waitConfigProcessed(t, tc.name, ngc.Generation)
			if cond.Status != metav1.ConditionFalse || cond.Reason != "RenderFailed" {
				t.Fatalf("Rendered condition: %+v", cond)
			}
			for _, want := range append(tc.wantMsg, "master, worker") {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("condition message should contain %q: %s", want, cond.Message)
				}
			}
			for group, before := range map[string]*bashiblev1alpha1.NodeGroupBundle{"worker": worker0, "master": master0} {
				if after := f.Bundle(t, group); after.ResourceVersion != before.ResourceVersion || checksum0(after) != checksum0(before) {
					t.Errorf("group %s changed although the NGC is broken", group)
				}
			}
			framework.Poll(t, "NodeGroup worker Rendered=False naming "+tc.name, func(ctx context.Context) (bool, error) {
				ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "worker", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				c := findCondition(ng.Status.Conditions, "Rendered")
				return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, tc.name), nil
			})
			framework.Poll(t, "a Warning event about "+tc.name, func(ctx context.Context) (bool, error) {
				evs, err := f.Kube.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("regarding.name", tc.name).String()})
				if err != nil {
					return false, err
				}
				for _, e := range evs.Items {
					if e.Type == "Warning" && e.Reason == "RenderFailed" && strings.Contains(e.Note, tc.wantMsg[0]) {
						return true, nil
					}
				}
				return false, nil
			})
			if after := renderErrors(t, "worker"); after <= errorsBefore {
				t.Errorf("render error metric for worker did not grow: %v → %v", errorsBefore, after)
			}

			// Fixing it rolls the step out and clears the conditions.
			fixed, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, tc.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fixed.Spec.Content = "echo fixed\n"
			fixed.Spec.Weight = tc.weight + 100
			fixed, err = f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, fixed, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cond := waitConfigProcessed(t, tc.name, fixed.Generation); cond.Status != metav1.ConditionTrue {
				t.Fatalf("after the fix: %+v", cond)
			}
			f.WaitChecksum(t, "worker", func(s string) bool { return s != checksum0(worker0) })
			if err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(ctx, tc.name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// Both groups take the step: the next case starts from both
			// back where they were (master's republish came after the next
			// case's snapshot once).
			f.WaitChecksum(t, "worker", func(s string) bool { return s == checksum0(worker0) })
			f.WaitChecksum(t, "master", func(s string) bool { return s == checksum0(master0) })
			framework.Poll(t, "NodeGroup worker Rendered again", func(ctx context.Context) (bool, error) {
				ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "worker", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				c := findCondition(ng.Status.Conditions, "Rendered")
				return c != nil && c.Status == metav1.ConditionTrue, nil
			})
		})
	}
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// renderErrors reads bashible_apiserver_render_errors_total for a group.
func renderErrors(t *testing.T, group string) float64 {
	t.Helper()
	_, body := direct(t, replica.Port, "/metrics")
	prefix := `bashible_apiserver_render_errors_total{group="` + group + `"} `
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return n
		}
	}
	return 0
}
