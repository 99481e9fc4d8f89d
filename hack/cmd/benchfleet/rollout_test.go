package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// TestCountRolloutSaysWhatHoldsAStalledRollout is the state both 5,000-node
// runs stopped in: the first batch applied the update while not Ready,
// so it keeps its approvals and the rest waits.
func TestCountRolloutSaysWhatHoldsAStalledRollout(t *testing.T) {
	t.Parallel()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	add := func(name string, ready corev1.ConditionStatus, sum string, annotations ...string) {
		n := fleetNodeWithReady(name, ready)
		n.Annotations = map[string]string{}
		if sum != "" {
			n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] = sum
		}
		for _, a := range annotations {
			n.Annotations[a] = ""
		}
		if err := store.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	add("done", corev1.ConditionTrue, "new")
	add("held-1", corev1.ConditionUnknown, "new", deckhousev1.ApprovedAnnotation)
	add("held-2", corev1.ConditionUnknown, "new", deckhousev1.ApprovedAnnotation)
	add("applying", corev1.ConditionTrue, "", deckhousev1.ApprovedAnnotation)
	add("reported", corev1.ConditionTrue, "new", deckhousev1.ApprovedAnnotation)
	add("waiting-1", corev1.ConditionTrue, "", deckhousev1.WaitingForApprovalAnnotation)
	add("waiting-2", corev1.ConditionUnknown, "", deckhousev1.WaitingForApprovalAnnotation)
	add("old", corev1.ConditionTrue, "old")

	c := countRollout(store, "new")
	want := rolloutCounts{nodes: 8, notReady: 3, done: 1, approved: 4, appliedNotReady: 2, waiting: 2}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if why := c.why(); !strings.Contains(why, "2 approved nodes applied the update but are not Ready") {
		t.Errorf("why: %q; want the approved nodes that applied it and are not Ready named first", why)
	}
	if n := countApplied(store, "new"); n != 4 {
		t.Errorf("applied %d, want 4", n)
	}
}
