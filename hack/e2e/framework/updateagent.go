package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// Agent plays bashible's side of the update protocol for a Node in Go (the
// same steps as templates/tree: ask for approval while removing the
// checksum, wait, ask for a disruption if the update needs one, then
// report the checksum), and plays the kubelet's heartbeat. The controllers
// suite's TestRolloutWithRealBashible runs the real bashible.sh; agents
// make protocol tests fast and their timing controllable.
type Agent struct {
	Name, Group string
	// Disruptive says whether applying a checksum needs a disruption.
	Disruptive atomic.Bool
	// Ready is the Ready condition the agent reports.
	Ready atomic.Bool
	// ReadyMessage, when set, is the Ready condition's message (a kubelet
	// writes there what it likes).
	ReadyMessage atomic.Pointer[string]
	// Paused stops the agent from acting (a node whose bashible is stuck).
	Paused atomic.Bool
	// ApplyTakes is how long applying an approved update takes (nanoseconds).
	ApplyTakes atomic.Int64

	// failure is the bashible run the agent fails (FailOn), if any.
	failure atomic.Pointer[stepFailure]
	// reported is the failure last reported on the Instance, failEvent
	// the one last reported in an Event (agent's goroutine).
	reported, failEvent *stepFailure

	f          *Framework
	approvedAt time.Time // owned by the agent's goroutine
	stop       context.CancelFunc
	done       chan struct{}
}

// TestAgent registers a Node in group and starts its agent; it starts on
// the group's current checksum, as a node that has joined and converged.
// The node is the group's by its Instance, as node-manager's approver
// makes it at the join (created first, deleted when the test ends, unless
// the test made one). The agent stops and the Node goes when the test ends.
func (f *Framework) TestAgent(t *testing.T, name, group string) *Agent {
	t.Helper()
	if _, err := f.NM.DeckhouseV1alpha1().Instances().Get(Context(t), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		f.TestInstance(t, NewInstance(name, group))
	}
	return f.TestAgentWithoutInstance(t, name, group)
}

// TestAgentWithoutInstance is TestAgent for a node node-manager never
// admitted: labelled with group, but without an Instance, so it belongs to
// no group.
func (f *Framework) TestAgentWithoutInstance(t *testing.T, name, group string) *Agent {
	t.Helper()
	ctx := Context(t)
	node := NewNode(name, group)
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
	a := &Agent{Name: name, Group: group, f: f, done: make(chan struct{})}
	a.Ready.Store(true)
	if err := f.ReportNodeReady(ctx, name, true); err != nil {
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

// ReportNodeReady reports the node's Ready condition now, with a capacity,
// as its kubelet would (kube-controller-manager marks silent nodes unknown).
func (f *Framework) ReportNodeReady(ctx context.Context, name string, ready bool) error {
	return f.reportNodeReady(ctx, name, ready, "")
}

func (f *Framework) reportNodeReady(ctx context.Context, name string, ready bool, message string) error {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: st, Reason: "SimulatedKubelet", Message: message, LastHeartbeatTime: now, LastTransitionTime: now,
	}}, "nodeInfo": map[string]any{"kubeletVersion": "v1.36.3"},
		"capacity":    map[string]string{"pods": "110", "cpu": "4", "memory": "8Gi"},
		"allocatable": map[string]string{"pods": "110", "cpu": "4", "memory": "8Gi"}}})
	if _, err := f.Kube.CoreV1().Nodes().PatchStatus(ctx, name, patch); err != nil {
		return fmt.Errorf("heartbeat of %s: %w", name, err)
	}
	return nil
}

func (a *Agent) run(ctx context.Context) {
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
		if time.Since(lastBeat) > 5*time.Second || a.Ready.Load() != lastReady {
			msg := ""
			if m := a.ReadyMessage.Load(); m != nil {
				msg = *m
			}
			if a.f.reportNodeReady(ctx, a.Name, a.Ready.Load(), msg) == nil {
				lastBeat, lastReady = time.Now(), a.Ready.Load()
			}
		}
		if !a.Paused.Load() {
			a.step(ctx)
		}
	}
}

// stepFailure is a bashible step that fails on one configuration.
type stepFailure struct{ checksum, step, output string }

// FailOn makes the agent's bashible run of configuration checksum fail at
// step, as bashible.sh reports it: the Instance's BashibleReady turns
// False (StepsFailed, "step <step> failed with exit status 1 ...") and a
// Warning BashibleStepFailed Event about the Node ends with "last output:
// <output>". The node keeps its approval and never reports the checksum
// until Heal or another configuration. The agent creates the node's
// Instance (deleted when the test ends) if it has none.
func (a *Agent) FailOn(t *testing.T, checksum, step, output string) {
	t.Helper()
	ctx := Context(t)
	if _, err := a.f.NM.DeckhouseV1alpha1().Instances().Get(ctx, a.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		a.f.TestInstance(t, NewInstance(a.Name, a.Group))
	}
	a.failure.Store(&stepFailure{checksum: checksum, step: step, output: output})
}

// Heal lets the agent's failing run succeed: it applies the configuration
// and reports BashibleReady True, as a step that passes on a retry.
func (a *Agent) Heal() { a.failure.Store(nil) }

// reportRun reports a run on the Instance, as bashible.sh does: False
// with the step's note and an Event with its output, or True once it converged.
func (a *Agent) reportRun(ctx context.Context, failed *stepFailure, target string) {
	if failed == a.reported {
		return
	}
	status, reason, msg := metav1.ConditionTrue, "StepsCompleted", fmt.Sprintf("configuration %.12s applied", target)
	if failed != nil {
		status, reason = metav1.ConditionFalse, "StepsFailed"
		msg = fmt.Sprintf("step %s failed with exit status 1 after 0s (attempt 1 of 3)", failed.step)
	}
	if failed != nil && a.failEvent != failed {
		// The Event first, then the condition, as bashible.sh reports.
		ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "bashible-" + a.Name + "-", Namespace: metav1.NamespaceDefault},
			EventTime: metav1.NewMicroTime(time.Now()), ReportingController: "bashible", ReportingInstance: a.Name, Action: "Converge",
			Type: corev1.EventTypeWarning, Reason: "BashibleStepFailed", Note: msg + "; last output: " + failed.output,
			Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: a.Name}}
		if _, err := a.f.Kube.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			return
		}
		a.failEvent = failed
	}
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []metav1.Condition{{
		Type: "BashibleReady", Status: status, Reason: reason, Message: msg, LastTransitionTime: now}}}})
	if _, err := a.f.NM.DeckhouseV1alpha1().Instances().Patch(ctx, a.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsNotFound(err) && failed == nil {
			a.reported = nil // no Instance: nothing to report
		}
		return
	}
	a.reported = failed
}

// step does one thing of the protocol, guarded by the Node's resourceVersion.
func (a *Agent) step(ctx context.Context) {
	n, err := a.f.Kube.CoreV1().Nodes().Get(ctx, a.Name, metav1.GetOptions{})
	if err != nil {
		return
	}
	b, err := a.f.NM.BashibleV1alpha1().NodeGroupBundles().Get(ctx, a.Group, metav1.GetOptions{})
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
	case a.Disruptive.Load() && !has(deckhousev1.DisruptionApprovedAnnotation):
		if has(deckhousev1.DisruptionRequiredAnnotation) {
			return
		}
		set = map[string]any{deckhousev1.DisruptionRequiredAnnotation: ""}
	case a.failing(target) != nil:
		a.reportRun(ctx, a.failing(target), target)
		return
	default:
		if a.reported != nil {
			a.reportRun(ctx, nil, target)
		}
		if a.approvedAt.IsZero() {
			a.approvedAt = time.Now()
		}
		if time.Since(a.approvedAt) < time.Duration(a.ApplyTakes.Load()) {
			return
		}
		a.approvedAt = time.Time{}
		set = map[string]any{deckhousev1.ConfigurationChecksumAnnotation: target}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": set}})
	_, _ = a.f.Kube.CoreV1().Nodes().Patch(ctx, a.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// failing is the failure of the run of target, nil when it succeeds.
func (a *Agent) failing(target string) *stepFailure {
	if fl := a.failure.Load(); fl != nil && fl.checksum == target {
		return fl
	}
	return nil
}

// Monitor watches the Nodes of a group and records the most nodes ever
// approved at once, how many times each node was approved, and every
// moment a node was drained while its drain had failed.
type Monitor struct {
	mu          sync.Mutex
	maxApproved int
	approvals   map[string]int
	violations  []string
	state       map[string]*corev1.Node // the group's Nodes as last seen
}

// WatchNodes calls seen with every event of the group's Nodes, in order,
// until the test ends: first an Added event for each Node that exists,
// then every change. It watches through an informer, so it resumes, and
// relists when it must, when kube-apiserver closes the watch (as it does
// when it restarts).
func (f *Framework) WatchNodes(t *testing.T, group string, seen func(watch.EventType, *corev1.Node)) {
	t.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(f.Kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = deckhousev1.NodeGroupLabel + "=" + group
	}))
	informer := factory.Core().V1().Nodes().Informer()
	node := func(obj any) *corev1.Node {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		n, _ := obj.(*corev1.Node)
		return n
	}
	var mu sync.Mutex // events in order, one at a time
	emit := func(typ watch.EventType, obj any) {
		if n := node(obj); n != nil {
			mu.Lock()
			defer mu.Unlock()
			seen(typ, n)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { emit(watch.Added, obj) },
		UpdateFunc: func(_, obj any) { emit(watch.Modified, obj) },
		DeleteFunc: func(obj any) { emit(watch.Deleted, obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	if !cache.WaitForCacheSync(Context(t).Done(), informer.HasSynced) {
		t.Fatalf("the Nodes of group %s did not sync", group)
	}
}

// WatchGroup starts a Monitor of the group's Nodes for the rest of the test.
func (f *Framework) WatchGroup(t *testing.T, group string) *Monitor {
	t.Helper()
	m := &Monitor{approvals: map[string]int{}, state: map[string]*corev1.Node{}}
	state := m.state
	f.WatchNodes(t, group, func(typ watch.EventType, n *corev1.Node) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if prev := state[n.Name]; typ != watch.Deleted && nodes.Has(n, deckhousev1.ApprovedAnnotation) && (prev == nil || !nodes.Has(prev, deckhousev1.ApprovedAnnotation)) {
			m.approvals[n.Name]++
		}
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
		m.maxApproved = max(m.maxApproved, approved)
		if nodes.Has(n, deckhousev1.DrainedAnnotation) && nodes.Has(n, deckhousev1.DrainFailedAnnotation) {
			m.violations = append(m.violations, fmt.Sprintf("%s is drained and drain-failed at once", n.Name))
		}
	})
	return m
}

// Annotation is the value of the node's annotation key as the Monitor
// has seen it last ("" when absent or the node unseen): a test writes a
// marker and waits for it to know the Monitor has caught up with every
// write before it.
func (m *Monitor) Annotation(node, key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.state[node]; n != nil {
		return n.Annotations[key]
	}
	return ""
}

// Reset forgets the most nodes approved at once.
func (m *Monitor) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxApproved = 0
}

// MaxApproved is the most nodes approved at once since the Monitor
// started or was Reset.
func (m *Monitor) MaxApproved() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxApproved
}

// Approvals is how many times the node was approved since the Monitor
// started: once per rollout it took part in.
func (m *Monitor) Approvals(node string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.approvals[node]
}

// Check fails the test when more than limit nodes were approved at once or
// a node was drained and drain-failed at once.
func (m *Monitor) Check(t *testing.T, limit int) {
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

// Kubelet finishes the deletion of evicted pods on simulated nodes (there
// is no kubelet to do it) and keeps created pods Running and Ready, so
// kube-controller-manager counts them for PodDisruptionBudgets. It returns
// when its watch ends; a suite runs it in a loop until it stops.
func (f *Framework) Kubelet(ctx context.Context) {
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

// NewConfiguration gives the group a new configuration (a custom step
// named <group>-step, created for the test or updated) and returns the
// new checksum once it is served.
func (f *Framework) NewConfiguration(t *testing.T, group, content string) string {
	t.Helper()
	before := f.Checksum(t, group)
	name := group + "-step"
	ngc, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(Context(t), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		f.TestConfiguration(t, name, deckhousev1alpha1.NodeGroupConfigurationSpec{Content: content, NodeGroups: []string{group}, Bundles: []string{"*"}})
	case err != nil:
		t.Fatal(err)
	default:
		ngc.Spec.Content = content
		if _, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Update(Context(t), ngc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return f.WaitChecksum(t, group, func(sum string) bool { return sum != before })
}

// WaitRolledOut waits until every node of the group reports sum, carries
// no update annotation, is schedulable, and the group's status says so.
func (f *Framework) WaitRolledOut(t *testing.T, group, sum string, count int) {
	t.Helper()
	Poll(t, fmt.Sprintf("rollout of %.12s over group %s", sum, group), func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if int(ng.Status.UpToDate) != count || int(ng.Status.Nodes) != count {
			return false, nil
		}
		// The group's nodes are its Instances' (a node's own label may
		// say another group).
		insts, err := f.NM.DeckhouseV1alpha1().Instances().List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=" + group})
		if err != nil {
			return false, nil
		}
		for _, inst := range insts.Items {
			n, err := f.Kube.CoreV1().Nodes().Get(ctx, inst.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return false, nil
			}
			if n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != sum || n.Spec.Unschedulable {
				return false, nil
			}
			for k := range n.Annotations {
				if len(k) > len(deckhousev1.UpdateAnnotationPrefix) && strings.HasPrefix(k, deckhousev1.UpdateAnnotationPrefix) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}
