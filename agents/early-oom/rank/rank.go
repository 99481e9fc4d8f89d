// Package rank chooses the pod to evict under memory pressure the way the
// kubelet's node-pressure eviction does (rankMemoryPressure in
// k8s.io/kubernetes/pkg/kubelet/eviction): first the pods whose memory
// working set exceeds their memory request, then the lowest priority, then
// the largest working set above the request. It also leaves out the pods
// it must never touch, as the kubelet refuses to evict critical pods:
// mirror pods of static pods, pods of system-critical priority
// (system-node-critical, system-cluster-critical), and the agent's own pod.
// What exempts a pod is decided by the kubelet or an admin, never by what
// a pod's author can write: a pod counts as a static pod's mirror only
// with the mirror annotation and its Node as owner (which the kubelet
// sets; an annotation alone anyone may set), and a pod being deleted is
// ranked like any other unless its grace period is already no longer
// than the one early-oom would give it (a long grace period would
// otherwise keep a pod that goes on allocating out of reach).
//
// One difference from the kubelet, on purpose: the kubelet ranks a pod it
// has no statistics for first (for it, a running pod without statistics is
// a fault). Here usage comes from the node's cgroups, and a pod without a
// cgroup is not running on this node yet or any more; evicting it would
// free nothing, so it is not a candidate at all.
package rank

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SystemCriticalPriority is the lowest priority of the system-critical
// classes (system-cluster-critical; system-node-critical is 1000 above it):
// the kubelet never evicts a pod at or above it, nor does early-oom.
const SystemCriticalPriority int32 = 2_000_000_000

// The built-in priority classes, recognised by name too in case a pod's
// priority was not resolved.
var criticalClasses = []string{"system-node-critical", "system-cluster-critical"}

// Candidate is a pod that may be evicted, with the figures it was ranked by.
type Candidate struct {
	Pod *corev1.Pod
	// Usage is the pod's memory working set, Request its memory request
	// (bytes).
	Usage, Request int64
	// Priority is the pod's priority (0 when unset).
	Priority int32
	// QoS is the pod's QoS class as the API server computed it.
	QoS corev1.PodQOSClass
}

// ExceedsRequest says the pod uses more memory than it requested.
func (c Candidate) ExceedsRequest() bool { return c.Usage > c.Request }

// AboveRequest is the working set above the request (negative below it).
func (c Candidate) AboveRequest() int64 { return c.Usage - c.Request }

// Rank returns the pods that may be evicted, the first one to evict first.
// usage is the working set by pod UID (cgroup.Reader); self is the agent's
// own pod UID, never a candidate; grace is the longest termination grace
// period a victim gets, in seconds.
func Rank(pods []*corev1.Pod, usage map[types.UID]int64, self types.UID, grace int64) []Candidate {
	var cands []Candidate
	for _, p := range pods {
		if _, ok := Protected(p, self, grace); ok {
			continue
		}
		u, ok := usage[p.UID]
		if !ok {
			continue
		}
		cands = append(cands, Candidate{Pod: p, Usage: u, Request: MemoryRequest(p), Priority: priority(p), QoS: p.Status.QOSClass})
	}
	slices.SortStableFunc(cands, compare)
	return cands
}

// compare orders a before b when a is to be evicted first.
func compare(a, b Candidate) int {
	if a.ExceedsRequest() != b.ExceedsRequest() {
		if a.ExceedsRequest() {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(b.AboveRequest(), a.AboveRequest()); c != 0 {
		return c
	}
	// Not in the kubelet: a stable order among equals, so that a test and
	// an operator see the same choice twice.
	return cmp.Or(cmp.Compare(a.Pod.Namespace, b.Pod.Namespace), cmp.Compare(a.Pod.Name, b.Pod.Name))
}

// Protected says why p is never evicted, if it is: it is the agent itself,
// a static pod's mirror, of system-critical priority, or not running
// (finished, or being deleted within grace seconds anyway).
func Protected(p *corev1.Pod, self types.UID, grace int64) (reason string, protected bool) {
	switch {
	case self != "" && p.UID == self:
		return "the agent's own pod", true
	case isMirror(p):
		return "a static pod's mirror", true
	case priority(p) >= SystemCriticalPriority || slices.Contains(criticalClasses, p.Spec.PriorityClassName):
		return "of system-critical priority", true
	case p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds <= grace:
		return "already being deleted", true
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return "finished", true
	}
	return "", false
}

// isMirror: the kubelet creates the API's copy of a static pod (its mirror
// pod) with the mirror annotation and its Node as owner, and the API keeps
// both from changing later. Anyone who may create a pod may write either
// annotation (config.source, config.mirror), so an annotation alone
// exempts nothing; early-oom reads pods from the API, where a static pod
// is only ever its mirror.
func isMirror(p *corev1.Pod) bool {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; !ok {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.APIVersion == "v1" && o.Kind == "Node" && o.Name == p.Spec.NodeName && p.Spec.NodeName != "" {
			return true
		}
	}
	return false
}

func priority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// MemoryRequest is the pod's effective memory request as the scheduler and
// the kubelet count it: the larger of the app containers' sum (with the
// sidecars, restartable init containers) and what any init container needs
// while the sidecars started before it run, plus the pod overhead.
func MemoryRequest(p *corev1.Pod) int64 {
	req := func(c corev1.Container) int64 {
		if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
			return q.Value()
		}
		return 0
	}
	var apps, sidecars, initPeak int64
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars += req(c)
			initPeak = max(initPeak, sidecars)
			continue
		}
		initPeak = max(initPeak, sidecars+req(c))
	}
	for _, c := range p.Spec.Containers {
		apps += req(c)
	}
	total := max(apps+sidecars, initPeak)
	if q, ok := p.Spec.Overhead[corev1.ResourceMemory]; ok {
		total += q.Value()
	}
	return total
}
