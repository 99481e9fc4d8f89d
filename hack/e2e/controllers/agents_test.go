package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// agent plays bashible's side of the update protocol for a Node in Go (the
// same steps as templates/tree: ask for approval while removing the
// checksum, wait, ask for a disruption if the update needs one, then
// report the checksum), and plays the kubelet's heartbeat. TestRollout
// WithRealBashible runs the real bashible.sh; these agents make the
// protocol tests fast and their timing controllable.
type agent struct {
	name, group string
	// disruptive says whether applying a checksum needs a disruption.
	disruptive atomic.Bool
	// ready is the Ready condition the agent reports.
	ready atomic.Bool
	// paused stops the agent from acting (a node whose bashible is stuck).
	paused atomic.Bool
	// applyTakes is how long applying an approved update takes (nanoseconds).
	applyTakes atomic.Int64
	approvedAt time.Time // owned by the agent's goroutine
	stop       context.CancelFunc
	done       chan struct{}
}

// newAgent registers a Node in group and starts its agent; it starts on
// the group's current checksum, as a node that has joined and converged.
func newAgent(t *testing.T, name, group string) *agent {
	t.Helper()
	ctx := framework.Context(t)
	node := framework.NewNode(name, group)
	sum, err := f.ServedChecksum(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if sum != "" {
		node.Annotations = map[string]string{deckhousev1.ConfigurationChecksumAnnotation: sum}
	}
	if _, err := f.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	a := &agent{name: name, group: group, done: make(chan struct{})}
	a.ready.Store(true)
	if err := a.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	go a.run(actx)
	t.Cleanup(func() {
		a.stop()
		<-a.done
		_ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return a
}

func (a *agent) heartbeat(ctx context.Context) error { return heartbeat(ctx, a.name, a.ready.Load()) }

// heartbeat reports the node's Ready condition now, with a capacity, as
// its kubelet would (kube-controller-manager marks silent nodes unknown).
func heartbeat(ctx context.Context, name string, ready bool) error {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: st, Reason: "SimulatedKubelet", LastHeartbeatTime: now, LastTransitionTime: now,
	}}, "nodeInfo": map[string]any{"kubeletVersion": "v1.36.3"},
		"capacity":    map[string]string{"pods": "110", "cpu": "4", "memory": "8Gi"},
		"allocatable": map[string]string{"pods": "110", "cpu": "4", "memory": "8Gi"}}})
	if _, err := f.Kube.CoreV1().Nodes().PatchStatus(ctx, name, patch); err != nil {
		return fmt.Errorf("heartbeat of %s: %w", name, err)
	}
	return nil
}

func (a *agent) run(ctx context.Context) {
	defer close(a.done)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastBeat, lastReady := time.Time{}, true
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(lastBeat) > 5*time.Second || a.ready.Load() != lastReady {
			if a.heartbeat(ctx) == nil {
				lastBeat, lastReady = time.Now(), a.ready.Load()
			}
		}
		if !a.paused.Load() {
			a.step(ctx)
		}
	}
}

// step does one thing of the protocol, guarded by the Node's resourceVersion.
func (a *agent) step(ctx context.Context) {
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, a.name, metav1.GetOptions{})
	if err != nil {
		return
	}
	b, err := f.NM.BashibleV1alpha1().NodeGroupBundles().Get(ctx, a.group, metav1.GetOptions{})
	if err != nil {
		return
	}
	target := b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
	has := func(k string) bool { return nodes.Has(n, k) }
	var set map[string]any
	switch {
	case n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == target && !has(deckhousev1.WaitingForApprovalAnnotation):
		return // in sync (or applied and waiting for node-manager to clean up)
	case !has(deckhousev1.ApprovedAnnotation) && !has(deckhousev1.WaitingForApprovalAnnotation):
		set = map[string]any{deckhousev1.WaitingForApprovalAnnotation: "", deckhousev1.ConfigurationChecksumAnnotation: nil}
	case !has(deckhousev1.ApprovedAnnotation):
		return // waiting for approval
	case a.disruptive.Load() && !has(deckhousev1.DisruptionApprovedAnnotation):
		if has(deckhousev1.DisruptionRequiredAnnotation) {
			return
		}
		set = map[string]any{deckhousev1.DisruptionRequiredAnnotation: ""}
	default:
		if a.approvedAt.IsZero() {
			a.approvedAt = time.Now()
		}
		if time.Since(a.approvedAt) < time.Duration(a.applyTakes.Load()) {
			return
		}
		a.approvedAt = time.Time{}
		set = map[string]any{deckhousev1.ConfigurationChecksumAnnotation: target}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": set}})
	_, _ = f.Kube.CoreV1().Nodes().Patch(ctx, a.name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// monitor watches the Nodes of a group and records the most nodes ever
// approved at once, and every moment a node was drained while its drain
// had failed.
type monitor struct {
	mu          sync.Mutex
	maxApproved int
	violations  []string
}

// watchNodes calls seen with every event of the group's Nodes, in order,
// until the test ends.
func watchNodes(t *testing.T, group string, seen func(watch.EventType, *corev1.Node)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := f.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=" + group})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				seen(ev.Type, n)
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
}

func watchGroup(t *testing.T, group string) *monitor {
	t.Helper()
	m := &monitor{}
	state := map[string]*corev1.Node{}
	watchNodes(t, group, func(typ watch.EventType, n *corev1.Node) {
		if typ == watch.Deleted {
			delete(state, n.Name)
		} else {
			state[n.Name] = n
		}
		approved := 0
		for _, s := range state {
			if nodes.Has(s, deckhousev1.ApprovedAnnotation) {
				approved++
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.maxApproved = max(m.maxApproved, approved)
		if nodes.Has(n, deckhousev1.DrainedAnnotation) && nodes.Has(n, deckhousev1.DrainFailedAnnotation) {
			m.violations = append(m.violations, fmt.Sprintf("%s is drained and drain-failed at once", n.Name))
		}
	})
	return m
}

func (m *monitor) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxApproved = 0
}

func (m *monitor) check(t *testing.T, limit int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.maxApproved > limit {
		t.Errorf("%d nodes were approved at once; maxConcurrent allows %d", m.maxApproved, limit)
	}
	for _, v := range m.violations {
		t.Error(v)
	}
}

// kubelet finishes the deletion of evicted pods on simulated nodes (there
// is no kubelet to do it) and keeps created pods Running and Ready, so
// kube-controller-manager counts them for PodDisruptionBudgets.
func kubelet(ctx context.Context) {
	w, err := f.Kube.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" || ev.Type == watch.Deleted {
			continue
		}
		if p.DeletionTimestamp != nil {
			err := f.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				fmt.Printf("kubelet: finishing deletion of %s/%s: %v\n", p.Namespace, p.Name, err)
			}
			continue
		}
		if p.Status.Phase == corev1.PodPending {
			p = p.DeepCopy()
			now := metav1.Now()
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			p.Status.StartTime = &now
			_, _ = f.Kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		}
	}
}
