package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

func TestRolloutRespectsMaxConcurrent(t *testing.T) {
	t.Parallel()
	const group = "rollout"
	newGroup(t, group, nil)
	for i := range 5 {
		f.TestAgent(t, fmt.Sprintf("rollout-%d", i), group)
	}
	f.WaitRolledOut(t, group, f.Checksum(t, group), 5)
	m := f.WatchGroup(t, group)
	for i, c := range []struct {
		max   intstr.IntOrString
		limit int
	}{{intstr.FromInt32(1), 1}, {intstr.FromInt32(2), 2}, {intstr.FromString("40%"), 2}} {
		updateGroup(t, group, func(s *deckhousev1.NodeGroupSpec) { s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &c.max} })
		m.Reset()
		start := time.Now()
		sum := f.NewConfiguration(t, group, fmt.Sprintf("echo rollout %d\n", i))
		f.WaitRolledOut(t, group, sum, 5)
		m.Check(t, c.limit)
		t.Logf("maxConcurrent %s: 5 nodes rolled out in %s, at most %d approved at once", c.max.String(), time.Since(start).Round(time.Millisecond), m.MaxApproved())
		if m.MaxApproved() != c.limit {
			t.Errorf("maxConcurrent %s: at most %d approved at once; the rollout should use all %d slots", c.max.String(), m.MaxApproved(), c.limit)
		}
	}
	// The group's status counts only its own nodes and the compatibility
	// Secret follows the served checksum.
	framework.Poll(t, "group conditions Ready=True, Updating=False", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := ng.Status.Conditions
		return meta.IsStatusConditionTrue(c, "Ready") && meta.IsStatusConditionFalse(c, "Updating") &&
			ng.Status.ConditionSummary != nil && ng.Status.ConditionSummary.Ready == "True" && ng.Status.KubernetesVersion == "1.36", nil
	})
	framework.Poll(t, "configuration-checksums Secret", func(ctx context.Context) (bool, error) {
		s, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ConfigurationChecksumsSecret, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return string(s.Data[group]) == f.Checksum(t, group), nil
	})
}

func TestNotReadyGroupWaitsButNotReadyNodeGoesFirst(t *testing.T) {
	t.Parallel()
	const group = "unhealthy"
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		mc := intstr.FromInt32(2)
		s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &mc}
	})
	a, b, sick := f.TestAgent(t, "unhealthy-a", group), f.TestAgent(t, "unhealthy-b", group), f.TestAgent(t, "unhealthy-sick", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 3)

	sick.Ready.Store(false)
	sick.Paused.Store(true) // its bashible has not asked yet
	framework.Poll(t, "group Ready=False", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionFalse(ng.Status.Conditions, "Ready"), err
	})
	f.NewConfiguration(t, group, "echo unhealthy\n")
	framework.Poll(t, "healthy nodes waiting for approval", func(ctx context.Context) (bool, error) {
		return has(ctx, a.Name, deckhousev1.WaitingForApprovalAnnotation) && has(ctx, b.Name, deckhousev1.WaitingForApprovalAnnotation), nil
	})
	time.Sleep(2 * time.Second)
	for _, n := range []*framework.Agent{a, b} {
		if has(framework.Context(t), n.Name, deckhousev1.ApprovedAnnotation) {
			t.Fatalf("%s was approved while the group has a NotReady node", n.Name)
		}
	}
	// The sick node asks too: it is approved first, though the group is not healthy.
	sick.Paused.Store(false)
	framework.Poll(t, "the NotReady node approved", func(ctx context.Context) (bool, error) {
		return has(ctx, sick.Name, deckhousev1.ApprovedAnnotation) || annotation(ctx, sick.Name, deckhousev1.ConfigurationChecksumAnnotation) == f.Checksum(t, group), nil
	})
	if has(framework.Context(t), a.Name, deckhousev1.ApprovedAnnotation) || has(framework.Context(t), b.Name, deckhousev1.ApprovedAnnotation) {
		t.Fatal("a Ready node was approved while the group was not healthy")
	}
	sick.Ready.Store(true)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 3)
}

func TestManualDisruptionWaitsForAPerson(t *testing.T) {
	t.Parallel()
	const group = "manual"
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		s.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalManual}
	})
	n := f.TestAgent(t, "manual-a", group)
	f.TestAgent(t, "manual-b", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 2)
	n.Disruptive.Store(true)
	sum := f.NewConfiguration(t, group, "echo manual\n")
	framework.Poll(t, "disruption required", func(ctx context.Context) (bool, error) {
		return has(ctx, n.Name, deckhousev1.DisruptionRequiredAnnotation), nil
	})
	framework.Poll(t, "WaitingForDisruptiveApproval condition and metric", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil || !meta.IsStatusConditionTrue(ng.Status.Conditions, "WaitingForDisruptiveApproval") {
			return false, err
		}
		_, body, err := ctrl.Get(ctx, "/metrics")
		return err == nil && strings.Contains(body, `node_group_node_status{node="manual-a",node_group="manual",status="WaitingForManualDisruptionApproval"} 1`), nil
	})
	time.Sleep(2 * time.Second)
	ctx := framework.Context(t)
	if has(ctx, n.Name, deckhousev1.DisruptionApprovedAnnotation) || has(ctx, n.Name, deckhousev1.DrainingAnnotation) {
		t.Fatal("Manual mode approved or drained on its own")
	}
	annotate(t, n.Name, map[string]*string{deckhousev1.DisruptionApprovedAnnotation: ptr.To("")})
	f.WaitRolledOut(t, group, sum, 2)
	// Deckhouse's per-group family, which its dashboards and alerts read.
	framework.Poll(t, "the group's d8_node_group_* series", func(ctx context.Context) (bool, error) {
		_, body, err := ctrl.Get(ctx, "/metrics")
		return err == nil && strings.Contains(body, `d8_node_group_nodes{node_group_name="manual"} 2`) &&
			strings.Contains(body, `d8_node_group_up_to_date{node_group_name="manual"} 2`) &&
			strings.Contains(body, `d8_node_group_has_errors{node_group_name="manual"} 0`), nil
	})
}

func TestAutomaticDisruptionWaitsForItsWindowThenDrains(t *testing.T) {
	t.Parallel()
	const group = "windowed"
	later := time.Now().UTC().Add(3 * time.Hour)
	closed := []deckhousev1.DisruptionWindow{{From: later.Format("15:04"), To: later.Add(time.Hour).Format("15:04")}}
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		s.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalAutomatic,
			Automatic: &deckhousev1.AutomaticDisruptions{Windows: closed}}
	})
	n := f.TestAgent(t, "windowed-a", group)
	f.TestAgent(t, "windowed-b", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 2)
	pod := runPod(t, "windowed-a", "web", nil)

	n.Disruptive.Store(true)
	sum := f.NewConfiguration(t, group, "echo windowed\n")
	framework.Poll(t, "disruption required", func(ctx context.Context) (bool, error) {
		return has(ctx, n.Name, deckhousev1.DisruptionRequiredAnnotation), nil
	})
	time.Sleep(2 * time.Second)
	if ctx := framework.Context(t); has(ctx, n.Name, deckhousev1.DrainingAnnotation) || has(ctx, n.Name, deckhousev1.DisruptionApprovedAnnotation) {
		t.Fatal("a disruption was acted on outside the group's windows")
	}
	now := time.Now().UTC()
	updateGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		s.Disruptions.Automatic.Windows = []deckhousev1.DisruptionWindow{{From: now.Add(-time.Hour).Format("15:04"), To: now.Add(time.Hour).Format("15:04")}}
	})
	framework.Poll(t, "drained, then disruption approved", func(ctx context.Context) (bool, error) {
		if has(ctx, n.Name, deckhousev1.DisruptionApprovedAnnotation) || annotation(ctx, n.Name, deckhousev1.ConfigurationChecksumAnnotation) == sum {
			if podExists(ctx, pod) {
				t.Fatal("the disruption was approved before the node's pod was evicted")
			}
			return true, nil
		}
		return false, nil
	})
	f.WaitRolledOut(t, group, sum, 2)
}

// TestDrainBlockedByPodDisruptionBudget: with drainTimeoutPolicy Wait,
// nothing bypasses a PodDisruptionBudget: past the deadline the node is
// drain-failed naming the budget and the pod, the alert's metric is set,
// and the pod stays until the budget lets it go.
func TestDrainBlockedByPodDisruptionBudget(t *testing.T) {
	t.Parallel()
	const group = "pdb"
	// As in TestDrainDeletesPodHeldByBudgetAtTheDeadline: past the drain's
	// first eviction, so the budget that refused it is known.
	timeout := int32(10)
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		s.NodeDrainTimeoutSecond = &timeout
		s.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalAutomatic,
			Automatic: &deckhousev1.AutomaticDisruptions{DrainTimeoutPolicy: deckhousev1.DrainTimeoutWait}}
	})
	n := f.TestAgent(t, "pdb-a", group)
	f.TestAgent(t, "pdb-b", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 2)
	m := f.WatchGroup(t, group)
	pod := runPod(t, "pdb-a", "db", map[string]string{"app": "pdb-db"})
	daemon := runDaemonSet(t, "pdb-a")
	pdb := blockEvictions(t, "pdb-db")

	n.Disruptive.Store(true)
	sum := f.NewConfiguration(t, group, "echo pdb\n")
	framework.Poll(t, "drain-failed", func(ctx context.Context) (bool, error) {
		return has(ctx, n.Name, deckhousev1.DrainFailedAnnotation), nil
	})
	// drain-failed is written at the deadline, where Delete would have
	// deleted the pod.
	reason := annotation(framework.Context(t), n.Name, deckhousev1.DrainFailedAnnotation)
	if !strings.Contains(reason, "PodDisruptionBudget default/pdb-db") || !strings.Contains(reason, "pod default/"+pod.Name) {
		t.Errorf("drain-failed says %q; want the PodDisruptionBudget and the pod named", reason)
	}
	framework.Poll(t, "the held-by-PodDisruptionBudget metric", func(ctx context.Context) (bool, error) {
		_, body, err := ctrl.Get(ctx, "/metrics")
		return err == nil && strings.Contains(body, `node_manager_node_drain_held_by_pdb{node="pdb-a"} 1`), err
	})
	ctx := framework.Context(t)
	if has(ctx, n.Name, deckhousev1.DrainedAnnotation) || has(ctx, n.Name, deckhousev1.DisruptionApprovedAnnotation) {
		t.Fatal("a drain that did not finish was recorded as drained, or the update went on")
	}
	if !podExists(ctx, pod) {
		t.Fatal("the PodDisruptionBudget's pod was removed")
	}
	framework.Poll(t, "drain failure metric and event", func(ctx context.Context) (bool, error) {
		_, body, err := ctrl.Get(ctx, "/metrics")
		if err != nil || !strings.Contains(body, `node_manager_node_drain_failed{node="pdb-a"} 1`) {
			return false, err
		}
		evs, err := f.Kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "pdb-a" && e.Reason == "DrainFailed" {
				return true, nil
			}
		}
		return false, nil
	})
	if err := f.Kube.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Delete(ctx, pdb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitRolledOut(t, group, sum, 2)
	if podExists(framework.Context(t), pod) {
		t.Error("the node finished its disruptive update with its pod still on it")
	}
	if !podExists(framework.Context(t), daemon) {
		t.Error("the DaemonSet pod was evicted; drains leave DaemonSet pods alone")
	}
	m.Check(t, 1)
}

func TestDrainIsCancelledWhenTheAnnotationGoes(t *testing.T) {
	t.Parallel()
	const group = "cancel"
	timeout := int32(600)
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) { s.NodeDrainTimeoutSecond = &timeout })
	n := f.TestAgent(t, "cancel-a", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 1)
	pod := runPod(t, "cancel-a", "db", map[string]string{"app": "cancel-db"})
	blockEvictions(t, "cancel-db")
	annotate(t, n.Name, map[string]*string{deckhousev1.DrainingAnnotation: ptr.To("user")})
	framework.Poll(t, "cordon", func(ctx context.Context) (bool, error) {
		node, err := f.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err == nil && node.Spec.Unschedulable, err
	})
	annotate(t, n.Name, map[string]*string{deckhousev1.DrainingAnnotation: nil})
	framework.Poll(t, "DrainCancelled event", func(ctx context.Context) (bool, error) {
		evs, err := f.Kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == n.Name && e.Reason == "DrainCancelled" {
				return true, nil
			}
		}
		return false, nil
	})
	if ctx := framework.Context(t); has(ctx, n.Name, deckhousev1.DrainedAnnotation) || !podExists(ctx, pod) {
		t.Fatal("a cancelled drain went on")
	}
}

func has(ctx context.Context, node, key string) bool {
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	return err == nil && nodes.Has(n, key)
}

func annotation(ctx context.Context, node, key string) string {
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return n.Annotations[key]
}

func annotate(t *testing.T, node string, set map[string]*string) {
	t.Helper()
	s := &stack.SimNode{Name: node}
	if err := s.Annotate(framework.Context(t), f.CP, set); err != nil {
		t.Fatal(err)
	}
}

// runPod puts a Running, Ready pod on a node (the test kubelet marks it so).
func runPod(t *testing.T, node, name string, labels map[string]string, owners ...metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + name, Namespace: metav1.NamespaceDefault, Labels: labels, OwnerReferences: owners},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}},
			TerminationGracePeriodSeconds: new(int64)},
	}
	p, err := f.Kube.CoreV1().Pods(p.Namespace).Create(framework.Context(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	framework.Poll(t, "pod "+p.Name+" running", func(ctx context.Context) (bool, error) {
		got, err := f.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, nil
	})
	return p
}

func podExists(ctx context.Context, p *corev1.Pod) bool {
	got, err := f.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	return err == nil && got.UID == p.UID
}
