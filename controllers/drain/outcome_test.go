package drain

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
