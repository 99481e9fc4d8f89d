package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestDrainDeletesPodHeldByBudgetAtTheDeadline is the seeds' contract with
// the default drainTimeoutPolicy: the eviction a PodDisruptionBudget
// refuses is retried until the group's deadline, then the pod is deleted,
// an Event on the Node names the pod and the budget, and the update goes on.
func TestDrainDeletesPodHeldByBudgetAtTheDeadline(t *testing.T) {
	t.Parallel()
	const group = "deadline"
	// Seconds, not minutes, and still well past the drain's first
	// eviction on a loaded machine (the deadline counts from before the
	// cordon; a pod never asked to leave would be deleted unnamed).
	timeout := int32(10)
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) { s.NodeDrainTimeoutSecond = &timeout })
	n := f.TestAgent(t, "deadline-a", group)
	f.TestAgent(t, "deadline-b", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 2)
	pod := runPod(t, n.Name, "db", map[string]string{"app": "deadline-db"})
	blockEvictions(t, "deadline-db")

	n.Disruptive.Store(true)
	sum := f.NewConfiguration(t, group, "echo deadline\n")
	var deleted eventsv1.Event
	framework.Poll(t, "the PodDeletedAtDrainDeadline event", func(ctx context.Context) (bool, error) {
		evs, err := nodeEvents(ctx, n.Name, "PodDeletedAtDrainDeadline")
		if len(evs) > 0 {
			deleted = evs[0]
		}
		return len(evs) > 0, err
	})
	for _, want := range []string{"pod default/" + pod.Name, "PodDisruptionBudget default/deadline-db", fmt.Sprintf("%ds", timeout)} {
		if !strings.Contains(deleted.Note, want) {
			t.Errorf("the event says %q; want it to name %q", deleted.Note, want)
		}
	}
	if r := deleted.Related; r == nil || r.Kind != "Pod" || r.Name != pod.Name || r.UID != pod.UID {
		t.Errorf("the event's related object is %+v; want the deleted pod", r)
	}
	// Not before the deadline: the drain was asked for at least the deadline earlier.
	requested, err := nodeEvents(framework.Context(t), n.Name, "DrainRequested")
	if err != nil || len(requested) == 0 {
		t.Fatalf("no DrainRequested event for %s: %v", n.Name, err)
	}
	if waited := eventTime(deleted).Sub(eventTime(requested[len(requested)-1])); waited < time.Duration(timeout)*time.Second {
		t.Errorf("the pod was deleted %s after the drain was asked for; want at least the deadline, %ds", waited, timeout)
	}
	f.WaitRolledOut(t, group, sum, 2)
	if podExists(framework.Context(t), pod) {
		t.Error("the pod is still there after the update")
	}
}

// TestOneNodeWorkerGroupIsDrained: only the only master and the controller's
// own node skip the drain; a worker group's only node is drained like any.
func TestOneNodeWorkerGroupIsDrained(t *testing.T) {
	t.Parallel()
	const group = "single"
	newGroup(t, group, nil)
	n := f.TestAgent(t, "single-a", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 1)
	pod := runPod(t, n.Name, "web", nil)

	n.Disruptive.Store(true)
	sum := f.NewConfiguration(t, group, "echo single\n")
	framework.Poll(t, "drained, then disruption approved", func(ctx context.Context) (bool, error) {
		if has(ctx, n.Name, deckhousev1.DisruptionApprovedAnnotation) || annotation(ctx, n.Name, deckhousev1.ConfigurationChecksumAnnotation) == sum {
			if podExists(ctx, pod) {
				t.Fatal("the disruption was approved with the node's pod still on it")
			}
			return true, nil
		}
		return false, nil
	})
	f.WaitRolledOut(t, group, sum, 1)
	f.WaitEventNote(t, n.Name, "DrainSucceeded", "")
}

// TestForeignCordonSurvivesTheUpdate: a node someone cordoned before the
// update is drained for it, and stays cordoned when the update is done.
func TestForeignCordonSurvivesTheUpdate(t *testing.T) {
	t.Parallel()
	const group = "cordon"
	newGroup(t, group, nil)
	n := f.TestAgent(t, "cordon-a", group)
	f.TestAgent(t, "cordon-b", group)
	f.WaitRolledOut(t, group, f.Checksum(t, group), 2)
	pod := runPod(t, n.Name, "web", nil)
	// kubectl cordon, by someone else.
	if _, err := f.Kube.CoreV1().Nodes().Patch(framework.Context(t), n.Name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	n.Disruptive.Store(true)
	sum := f.NewConfiguration(t, group, "echo cordon\n")
	framework.Poll(t, "the update of "+n.Name+" finished", func(ctx context.Context) (bool, error) {
		node, err := f.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil || node.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != sum {
			return false, err
		}
		for k := range node.Annotations {
			if strings.HasPrefix(k, deckhousev1.UpdateAnnotationPrefix) {
				return false, nil
			}
		}
		if !node.Spec.Unschedulable {
			t.Fatal("the node someone else cordoned was uncordoned by its update")
		}
		return true, nil
	})
	if podExists(framework.Context(t), pod) {
		t.Error("the cordoned node was not drained before its disruption")
	}
	f.WaitEventNote(t, n.Name, "DrainRequested", "stays cordoned")
}

// nodeEvents lists the Events about a node with the reason.
func nodeEvents(ctx context.Context, node, reason string) ([]eventsv1.Event, error) {
	list, err := f.Kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("regarding.name", node), fields.OneTermEqualSelector("reason", reason)).String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func eventTime(e eventsv1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.DeprecatedFirstTimestamp.Time
}
