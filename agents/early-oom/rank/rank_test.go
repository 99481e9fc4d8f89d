package rank

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const mi = 1 << 20

// pod is a running pod named name with a memory request (0: none), a QoS
// class and a priority, changed by each mutation.
func pod(name string, requestMi int64, qos corev1.PodQOSClass, prio int32, mutations ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{Priority: &prio, Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: qos},
	}
	if requestMi > 0 {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(requestMi*mi, resource.BinarySI)}
	}
	for _, m := range mutations {
		m(p)
	}
	return p
}

func names(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Pod.Name)
	}
	return out
}

// TestRankFollowsTheKubeletsMemoryOrder is the table of the issue: pods
// over their request before pods within it; among them the lower priority
// first; then the larger usage above request; critical, static, mirror and
// the agent's own pods never appear.
func TestRankFollowsTheKubeletsMemoryOrder(t *testing.T) {
	pods := []*corev1.Pod{
		pod("guaranteed-within", 512, corev1.PodQOSGuaranteed, 0),
		pod("burstable-over-small", 100, corev1.PodQOSBurstable, 0),
		pod("besteffort", 0, corev1.PodQOSBestEffort, 0),
		pod("burstable-over-big", 100, corev1.PodQOSBurstable, 0),
		pod("burstable-within", 400, corev1.PodQOSBurstable, 0),
		pod("important-over", 0, corev1.PodQOSBestEffort, 1000),
		pod("unimportant-within", 900, corev1.PodQOSBurstable, -10),
		pod("node-critical", 0, corev1.PodQOSBestEffort, 2_000_001_000),
		pod("cluster-critical", 0, corev1.PodQOSBestEffort, 2_000_000_000),
		pod("critical-by-class", 0, corev1.PodQOSBestEffort, 0, func(p *corev1.Pod) {
			p.Spec.Priority = nil
			p.Spec.PriorityClassName = "system-node-critical"
		}),
		pod("mirror", 0, corev1.PodQOSBestEffort, 0, mirror),
		pod("agent", 0, corev1.PodQOSBestEffort, 0),
		pod("terminating", 0, corev1.PodQOSBestEffort, 0, deleting(5)),
		pod("no-cgroup", 0, corev1.PodQOSBestEffort, 0),
	}
	usage := map[types.UID]int64{}
	for name, mib := range map[string]int64{
		"guaranteed-within": 500, "burstable-over-small": 150, "besteffort": 120, "burstable-over-big": 700,
		"burstable-within": 300, "important-over": 2000, "unimportant-within": 800,
		"node-critical": 9000, "cluster-critical": 9000, "critical-by-class": 9000, "mirror": 9000,
		"agent": 9000, "terminating": 9000,
	} {
		usage[types.UID("uid-"+name)] = mib * mi
	}

	got := names(Rank(pods, usage, "uid-agent", 5))
	want := []string{
		// over their request, priority 0, by usage above request
		"burstable-over-big",   // 600 Mi above
		"besteffort",           // 120 Mi above
		"burstable-over-small", // 50 Mi above
		// over their request, but of higher priority
		"important-over",
		// within their request: lowest priority first, then the least below request
		"unimportant-within",
		"guaranteed-within", // 12 Mi below
		"burstable-within",  // 100 Mi below
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ranked\n  %v\nwant\n  %v", got, want)
	}
}

func TestProtectedSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod("self", 0, corev1.PodQOSBestEffort, 0), "the agent's own pod"},
		{pod("m", 0, corev1.PodQOSBestEffort, 0, mirror), "a static pod's mirror"},
		{pod("going", 0, corev1.PodQOSBestEffort, 0, deleting(5)), "already being deleted"},
		{pod("c", 0, corev1.PodQOSBestEffort, SystemCriticalPriority), "of system-critical priority"},
		{pod("done", 0, corev1.PodQOSBestEffort, 0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), "finished"},
		{pod("ordinary", 0, corev1.PodQOSBestEffort, SystemCriticalPriority-1), ""},
	} {
		got, _ := Protected(tc.pod, "uid-self", 5)
		if got != tc.want {
			t.Errorf("%s: Protected says %q; want %q", tc.pod.Name, got, tc.want)
		}
	}
}

// mirror makes p what the kubelet makes of a static pod in the API: the
// mirror annotation and its Node as owner.
func mirror(p *corev1.Pod) {
	p.Spec.NodeName = "node-1"
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "abc", "kubernetes.io/config.source": "file"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: "uid-node-1"}}
}

// deleting makes p a pod being deleted with a grace period of seconds.
func deleting(seconds int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{}
		p.DeletionGracePeriodSeconds = &seconds
	}
}

// TestPodAuthorCannotExemptAHog is issue 35's item 7: what a pod's author
// can write (the static and mirror annotations without the Node as owner,
// a deletion with a long grace period) exempts nothing; the hog is the
// victim in every variant, and a real mirror pod stays exempt.
func TestPodAuthorCannotExemptAHog(t *testing.T) {
	for name, disguise := range map[string]func(*corev1.Pod){
		"config.source annotation": func(p *corev1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
		},
		"config.mirror annotation": func(p *corev1.Pod) {
			p.Spec.NodeName = "node-1"
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "abc", "kubernetes.io/config.source": "file"}
		},
		"mirror annotation, another node as owner": func(p *corev1.Pod) {
			mirror(p)
			p.OwnerReferences[0].Name = "node-2"
		},
		"being deleted with an hour's grace": deleting(3600),
	} {
		pods := []*corev1.Pod{
			pod("hog", 0, corev1.PodQOSBestEffort, 0, disguise),
			pod("neighbour", 0, corev1.PodQOSBestEffort, 0),
		}
		usage := map[types.UID]int64{"uid-hog": 4000 * mi, "uid-neighbour": 100 * mi}
		if got := names(Rank(pods, usage, "", 5)); len(got) == 0 || got[0] != "hog" {
			t.Errorf("%s: ranked %v; want the hog first", name, got)
		}
	}
	real := []*corev1.Pod{pod("static", 0, corev1.PodQOSBestEffort, 0, mirror), pod("neighbour", 0, corev1.PodQOSBestEffort, 0)}
	usage := map[types.UID]int64{"uid-static": 4000 * mi, "uid-neighbour": 100 * mi}
	if got := names(Rank(real, usage, "", 5)); fmt.Sprint(got) != "[neighbour]" {
		t.Errorf("with a real mirror pod: ranked %v; want [neighbour] (the kubelet's static pod is never a victim)", got)
	}
}

func TestMemoryRequestCountsInitContainersSidecarsAndOverhead(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	q := func(mib int64) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(mib*mi, resource.BinarySI)}}
	}
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "sidecar", Resources: q(50), RestartPolicy: &always},
			{Name: "migrate", Resources: q(400)},
		},
		Containers: []corev1.Container{{Name: "a", Resources: q(100)}, {Name: "b", Resources: q(200)}},
		Overhead:   corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(10*mi, resource.BinarySI)},
	}}
	// max(100+200+50, 50+400) + 10
	if got := MemoryRequest(p); got != 460*mi {
		t.Errorf("MemoryRequest = %d Mi; want 460 Mi", got/mi)
	}
}
