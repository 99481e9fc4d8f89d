package drain

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

func TestOutcomes(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{deckhousev1.DrainingAnnotation: "user"}}}
	f := Failed(n, strings.Repeat("x", 2000))
	f.ApplyTo(n)
	if got := n.Annotations[deckhousev1.DrainFailedAnnotation]; len(got) != maxReason || nodes.Has(n, deckhousev1.DrainedAnnotation) || !nodes.Has(n, deckhousev1.DrainingAnnotation) {
		t.Fatalf("after a failure: %v", n.Annotations)
	}
	if c := Failed(n, n.Annotations[deckhousev1.DrainFailedAnnotation]); !c.Empty() {
		t.Errorf("the same failure again should change nothing: %s", c)
	}
	Succeeded(n).ApplyTo(n)
	if n.Annotations[deckhousev1.DrainedAnnotation] != "user" || nodes.Has(n, deckhousev1.DrainingAnnotation) || nodes.Has(n, deckhousev1.DrainFailedAnnotation) {
		t.Errorf("after success: %v", n.Annotations)
	}
	m := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{deckhousev1.DrainingAnnotation: ""}}}
	if Source(m) != deckhousev1.DrainSourceBashible {
		t.Errorf("an empty draining value means bashible, got %q", Source(m))
	}
}

func TestSkip(t *testing.T) {
	owned := func(kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, Name: "x", Controller: ptr.To(true)}}
	}
	cases := map[string]struct {
		pod  corev1.Pod
		skip bool
	}{
		"plain":      {corev1.Pod{}, false},
		"replicaset": {corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("ReplicaSet")}}, false},
		"daemonset":  {corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("DaemonSet")}}, true},
		"mirror":     {corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}, true},
		"finished":   {corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, true},
	}
	for name, c := range cases {
		if got := skip(&c.pod); got != c.skip {
			t.Errorf("%s: skip %v, want %v", name, got, c.skip)
		}
	}
}

func TestPolicyDefaultsToDelete(t *testing.T) {
	auto := func(p deckhousev1.DrainTimeoutPolicy) *deckhousev1.NodeGroup {
		return &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{Disruptions: &deckhousev1.DisruptionsSpec{
			ApprovalMode: deckhousev1.ApprovalAutomatic, Automatic: &deckhousev1.AutomaticDisruptions{DrainTimeoutPolicy: p}}}}
	}
	for name, c := range map[string]struct {
		g    *deckhousev1.NodeGroup
		want deckhousev1.DrainTimeoutPolicy
	}{
		"no group":          {nil, deckhousev1.DrainTimeoutDelete},
		"no disruptions":    {&deckhousev1.NodeGroup{}, deckhousev1.DrainTimeoutDelete},
		"manual":            {&deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{Disruptions: &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalManual}}}, deckhousev1.DrainTimeoutDelete},
		"automatic, unset":  {auto(""), deckhousev1.DrainTimeoutDelete},
		"automatic, Delete": {auto(deckhousev1.DrainTimeoutDelete), deckhousev1.DrainTimeoutDelete},
		"automatic, Wait":   {auto(deckhousev1.DrainTimeoutWait), deckhousev1.DrainTimeoutWait},
	} {
		if got := Policy(c.g); got != c.want {
			t.Errorf("%s: policy %s, want %s", name, got, c.want)
		}
	}
}

func TestAtDeadline(t *testing.T) {
	held := Left{Pod: "default/db", Refused: true, Budgets: []string{"default/db"}, Err: "The disruption budget db needs 1 healthy pods and has 1 currently"}
	failing := Left{Pod: "default/web", Err: "evicting: the server is unavailable"}
	going := Left{Pod: "default/old", Terminating: true}
	left := []Left{held, failing, going}

	del := AtDeadline(deckhousev1.DrainTimeoutDelete, left)
	if len(del) != 2 || del[0].Pod != "default/db" || del[1].Pod != "default/web" {
		t.Errorf("Delete: deletes %+v; want every pod not terminating yet (db, web)", del)
	}
	if del := AtDeadline(deckhousev1.DrainTimeoutWait, left); len(del) != 0 {
		t.Errorf("Wait: deletes %+v; want nothing", del)
	}
	if !HeldByBudget(left) || HeldByBudget([]Left{failing, going}) {
		t.Error("HeldByBudget: want true only when a budget refused an eviction")
	}
	why := Why(left)
	for _, want := range []string{"pod default/db: eviction refused by PodDisruptionBudget default/db (The disruption budget db needs", "pod default/old is still terminating", "pod default/web: evicting: the server is unavailable"} {
		if !strings.Contains(why, want) {
			t.Errorf("Why = %q; want it to contain %q", why, want)
		}
	}
	msg := DeletedMessage(held, 3*time.Second)
	for _, want := range []string{"deleted pod default/db", "PodDisruptionBudget default/db refused its eviction", "3s", "drainTimeoutPolicy: Wait"} {
		if !strings.Contains(msg, want) {
			t.Errorf("DeletedMessage = %q; want it to contain %q", msg, want)
		}
	}
}

func TestBudgetsSelectLikeTheEvictionAPI(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "a", Labels: map[string]string{"app": "db"}}}
	pdb := func(ns, name string, sel *metav1.LabelSelector) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}}
	}
	app := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}
	}
	got := Budgets(pod, []policyv1.PodDisruptionBudget{
		pdb("a", "z-db", app("db")),
		pdb("a", "web", app("web")),
		pdb("b", "db", app("db")),
		pdb("a", "null", nil),
		pdb("a", "all", &metav1.LabelSelector{}),
	})
	if want := []string{"a/all", "a/z-db"}; !slices.Equal(got, want) {
		t.Errorf("Budgets = %v, want %v (same namespace, matching selector; a null selector selects nothing, an empty one everything)", got, want)
	}
}
