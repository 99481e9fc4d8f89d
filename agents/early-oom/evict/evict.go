// Package evict acts on the pod rank chose: it deletes it through the API
// with a short grace period, or, observing, only says it would, and
// records why on the pod and on its node.
//
// A DELETE of the pod rather than the eviction subresource, for two
// reasons. The kubelet's node-pressure eviction does not honour
// PodDisruptionBudgets either: under memory pressure waiting for a budget
// is waiting for the OOM killer. And the admission policy that confines the
// agent to its own node (manifests/policies/early-oom-own-node.yaml) can
// see the pod's spec.nodeName in a DELETE's oldObject, whereas an
// Eviction object carries only the pod's name. The DELETE has a UID
// precondition, so that a pod recreated under the same name (a StatefulSet
// replica) is never hit by a decision about its predecessor.
package evict

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"

	"github.com/node-manager/node-manager/agents/early-oom/detect"
	"github.com/node-manager/node-manager/agents/early-oom/rank"
)

// Event reasons, on the pod and on the node.
const (
	// ReasonEvicted: the pod was deleted to relieve memory pressure (the
	// kubelet's reason for its own node-pressure evictions).
	ReasonEvicted = "Evicted"
	// ReasonWouldEvict: observe mode; the pod would have been deleted.
	ReasonWouldEvict = "WouldEvict"
)

// Evidence is what the decision was made on.
type Evidence struct {
	Reason     detect.Reason
	Sample     detect.Sample
	Thresholds detect.Thresholds
}

// Evictor deletes or reports victims on one node.
type Evictor struct {
	Client   kubernetes.Interface
	Recorder events.EventRecorder
	// Node is the agent's node, the subject of the node's Events.
	Node *corev1.Node
	// GracePeriod bounds the victim's termination grace period (its own,
	// if shorter, is kept).
	GracePeriod time.Duration
}

// Evict deletes the victim and records Warning Events of reason Evicted on
// it and on the node.
func (e *Evictor) Evict(ctx context.Context, v rank.Candidate, ev Evidence) error {
	grace := int64(e.GracePeriod / time.Second)
	if own := v.Pod.Spec.TerminationGracePeriodSeconds; own != nil && *own < grace {
		grace = *own
	}
	uid := v.Pod.UID
	err := e.Client.CoreV1().Pods(v.Pod.Namespace).Delete(ctx, v.Pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s to relieve memory pressure: %w", v.Pod.Namespace, v.Pod.Name, err)
	}
	note := Message(v, ev) + fmt.Sprintf("; deleted with a %ds grace period", grace)
	e.Recorder.Eventf(v.Pod, e.Node, corev1.EventTypeWarning, ReasonEvicted, "Delete", "%s", note)
	e.Recorder.Eventf(e.Node, v.Pod, corev1.EventTypeWarning, ReasonEvicted, "Delete", "pod %s/%s: %s", v.Pod.Namespace, v.Pod.Name, note)
	return nil
}

// Report records Normal Events of reason WouldEvict on the victim and the
// node, and deletes nothing.
func (e *Evictor) Report(v rank.Candidate, ev Evidence) {
	note := Message(v, ev) + "; observe mode, nothing deleted"
	e.Recorder.Eventf(v.Pod, e.Node, corev1.EventTypeNormal, ReasonWouldEvict, "None", "%s", note)
	e.Recorder.Eventf(e.Node, v.Pod, corev1.EventTypeNormal, ReasonWouldEvict, "None", "pod %s/%s: %s", v.Pod.Namespace, v.Pod.Name, note)
}

// Message says why the pod was chosen, with the figures: the node's
// pressure and available memory against the thresholds, the pod's working
// set against its request, its QoS class and priority.
func Message(v rank.Candidate, ev Evidence) string {
	s, t := ev.Sample, ev.Thresholds
	why := ""
	switch ev.Reason {
	case detect.FullPressure:
		why = fmt.Sprintf("memory pressure full avg10=%.2f%% above %.2f%%", s.Pressure.Full.Avg10, t.FullAvg10)
	case detect.SomePressure:
		why = fmt.Sprintf("memory pressure some avg10=%.2f%% above %.2f%%", s.Pressure.Some.Avg10, t.SomeAvg10)
	case detect.LowMemory:
		why = fmt.Sprintf("MemAvailable %s below %s", size(s.Available), size(t.MinAvailable))
	}
	avail := "unknown"
	if s.Available >= 0 {
		avail = size(s.Available)
	}
	return fmt.Sprintf("early-oom: %s for %d samples (pods' full avg10=%.2f%%, some avg10=%.2f%%; node-wide full avg10=%.2f%%, some avg10=%.2f%%; MemAvailable %s); "+
		"the pod uses %s of memory against a request of %s (QoS %s, priority %d)",
		why, t.Samples, s.Pressure.Full.Avg10, s.Pressure.Some.Avg10, s.NodePressure.Full.Avg10, s.NodePressure.Some.Avg10, avail,
		size(v.Usage), size(v.Request), qos(v.QoS), v.Priority)
}

func size(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }

// qos names a pod's QoS class; a pod whose class the API did not set is
// Unknown (metrics use the same three names and Unknown).
func qos(c corev1.PodQOSClass) string {
	if c == "" {
		return "Unknown"
	}
	return string(c)
}

// QoS is the victim's class as a metric label.
func QoS(v rank.Candidate) string { return qos(v.QoS) }
