package earlyoom

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestThrasherAtItsOwnLimitEvictsNobody: a Guaranteed pod thrashes at its
// own 1 GiB limit on a node with half its RAM free. The kernel counts its
// stalls node-wide (full avg10 60 % in /proc/pressure/memory and in the
// pods' parent cgroup), but no other pod stalls: the node is not short,
// and early-oom deletes none of the thrasher's neighbours (issue 35, item
// 6), however long it lasts. The agent counts the samples whose node-wide
// figures it discounted; after ten of them (more than three times the three
// samples it acts on) every pod is still there.
func TestThrasherAtItsOwnLimitEvictsNobody(t *testing.T) {
	n := newNode(t, "oom-thrash", "workers")
	ns := metav1.NamespaceDefault
	thrasher := newPod(t, ns, "thrasher", n.name, podSpec{requestMi: 1024, limitMi: 1024})
	over := newPod(t, ns, "thrash-neighbour-over", n.name, podSpec{requestMi: 100})
	idle := newPod(t, ns, "thrash-neighbour-idle", n.name, podSpec{})
	if thrasher.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Fatalf("the thrasher is %s; the test needs Guaranteed", thrasher.Status.QOSClass)
	}
	a := startAgent(t, n)
	n.setUsage(t, thrasher, 1020)
	n.setLimit(t, thrasher, 1024)
	n.setPodPressure(t, thrasher, 70, 65)
	n.setUsage(t, over, 300)
	n.setPodPressure(t, over, 0, 0)
	n.setUsage(t, idle, 800)
	n.setPodPressure(t, idle, 0, 0)
	n.setUsage(t, a.pod, 20)
	n.setPodPressure(t, a.pod, 0, 0)

	neighbours := []*corev1.Pod{over, idle, thrasher}
	deleted := map[string]<-chan time.Time{}
	for _, p := range neighbours {
		deleted[p.Name] = watchDeletion(t, p)
	}
	n.setPodsPressure(t, 70, 60)
	n.setPressure(t, 70, 60)

	framework.Poll(t, "ten samples discounted as the thrasher's own (early_oom_limited_pressure_samples_total)", func(ctx context.Context) (bool, error) {
		for name, ch := range deleted {
			select {
			case <-ch:
				t.Fatalf("early-oom deleted %s while the only pod under pressure was the thrasher at its own limit, with half the node's RAM free; early-oom on %s:\n%s", name, n.name, a.Tail(20))
			default:
			}
		}
		return metric(ctx, t, a, "early_oom_limited_pressure_samples_total") >= 10, nil
	})
	for _, p := range neighbours {
		got, err := f.Kube.CoreV1().Pods(p.Namespace).Get(framework.Context(t), p.Name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s was deleted (%v)", p.Name, err)
		}
	}
	if evs := f.EventNotes(t, n.name, "Evicted"); len(evs) > 0 {
		t.Errorf("Evicted events on the node: %v", evs)
	}
}

// TestNodeWideHogIsEvictedAmongThePodsUnderPressure: a BestEffort pod
// without a limit eats the node; it and every busy neighbour stall, and
// the pods' parent cgroup shows it. early-oom acts on the samples-th sample
// (no sample is discounted, so it acts within samples × interval of the
// pressure crossing the threshold) and deletes the hog, the pod under
// pressure, rather than an idle pod further above its request that the
// kubelet's ranking alone would choose.
func TestNodeWideHogIsEvictedAmongThePodsUnderPressure(t *testing.T) {
	n := newNode(t, "oom-hog", "workers")
	ns := metav1.NamespaceDefault
	hog := newPod(t, ns, "node-hog", n.name, podSpec{})
	idleBig := newPod(t, ns, "idle-big", n.name, podSpec{requestMi: 100})
	busy := newPod(t, ns, "busy", n.name, podSpec{requestMi: 512, limitMi: 2048})
	a := startAgent(t, n)
	n.setUsage(t, hog, 800)
	n.setPodPressure(t, hog, 75, 70)
	n.setUsage(t, idleBig, 1100)
	n.setPodPressure(t, idleBig, 0, 0)
	n.setUsage(t, busy, 400)
	n.setLimit(t, busy, 2048)
	n.setPodPressure(t, busy, 40, 20)
	n.setUsage(t, a.pod, 20)
	n.setPodPressure(t, a.pod, 0, 0)

	deleted := watchDeletion(t, hog)
	n.setPodsPressure(t, 70, 60)
	crossed := time.Now()
	n.setPressure(t, 70, 60)
	at := waitDeleted(t, deleted, hog.Name)
	t.Logf("early-oom deleted the hog %s after the pressure crossed the threshold (sampling every 100 ms, 3 samples needed)", at.Sub(crossed).Round(time.Millisecond))
	if got := metric(framework.Context(t), t, a, "early_oom_limited_pressure_samples_total"); got != 0 {
		t.Errorf("early-oom discounted %v samples of a node-wide hog as a pod's own limit; want none", got)
	}
	for _, p := range []*corev1.Pod{idleBig, busy} {
		got, err := f.Kube.CoreV1().Pods(p.Namespace).Get(framework.Context(t), p.Name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s was deleted (%v); only the hog should be", p.Name, err)
		}
	}
}

// metric is the value of the unlabelled series name on a's /metrics; -1
// when it is not there (an agent that does not export it).
func metric(ctx context.Context, t *testing.T, a *agent, name string) float64 {
	t.Helper()
	code, body, err := a.Get(ctx, "/metrics")
	if err != nil || code != 200 {
		return -1
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}
