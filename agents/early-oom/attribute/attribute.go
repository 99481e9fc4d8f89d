// Package attribute tells memory pressure the node is short of from memory
// pressure a pod makes against its own limit, and says which pods are
// under pressure.
//
// The kernel's node-wide /proc/pressure/memory counts every stall,
// including those of a pod reclaiming its own pages at its own
// memory.max: one Guaranteed pod thrashing inside its limit on an idle
// node drives the node-wide full avg10 to the pod's own, with most of the
// RAM free. Evicting its neighbours frees nothing it needs. On cgroup v2
// each cgroup has its own memory.pressure, so the pressure the node's
// shortage causes is taken from the pods' cgroups instead:
//
//   - the pods' parent cgroup (kubepods) counts the stalls of pods only,
//     not of the node's daemons (a daemon at its own MemoryMax);
//   - a pod that is not at its own limit stalls only when the node (or
//     the pods' allocatable, kubepods' own limit) is short. Its pressure is
//     the node's shortage as felt by pods; the pressure of a pod at its
//     own limit is taken out.
//
// The pressure to act on is therefore, for "some" and "full" each, the
// parent's, but at most the highest of the pods that are not at their own
// limit. Without a limited pod that is the parent's own value (a pod's
// full is never below its parent's while the pod runs, and the parent's
// some is at least every child's); with only a thrasher stalled it is
// that of its idle neighbours: nothing. A node-wide hog with no limit
// stalls itself and every busy neighbour: its own pressure counts.
//
// Where the tree has no pressure files (cgroup v1, or a kernel with PSI
// switched off per cgroup) the node-wide figures are used as they are,
// and the pods cannot be told apart: the MemAvailable floor is then the
// trigger that tells a short node.
package attribute

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-manager/node-manager/agents/early-oom/cgroup"
	"github.com/node-manager/node-manager/agents/early-oom/psi"
	"github.com/node-manager/node-manager/agents/early-oom/rank"
)

// Source says where the pressure to act on came from.
type Source string

const (
	// Pods: the pods' cgroups, with pods at their own limit taken out.
	Pods Source = "pods"
	// Node: the node-wide file; the tree had no usable pressure files.
	Node Source = "node"
)

// Pressure is the memory pressure the node's shortage causes, from the
// node-wide pressure and the pods' cgroup tree (see the package comment).
func Pressure(nodeWide psi.Pressure, t cgroup.Tree) (psi.Pressure, Source) {
	if t.Parent == nil {
		return nodeWide, Node
	}
	parent := *t.Parent
	var some, full psi.Averages
	for _, p := range t.Pods {
		if p.AtLimit {
			continue
		}
		if p.Pressure == nil {
			// A pod whose stalls cannot be read could be the hog: the
			// parent's figures stand.
			return parent, Pods
		}
		some = maxAverages(some, p.Pressure.Some)
		full = maxAverages(full, p.Pressure.Full)
	}
	return psi.Pressure{Some: minAverages(parent.Some, some), Full: minAverages(parent.Full, full)}, Pods
}

// UnderPressure are the pods whose own cgroup stalled on memory in the
// last ten seconds; nil when the tree cannot say (no pressure files).
func UnderPressure(t cgroup.Tree) map[types.UID]bool {
	if t.Parent == nil {
		return nil
	}
	under := map[types.UID]bool{}
	for uid, p := range t.Pods {
		if p.Pressure != nil && p.Pressure.Some.Avg10 > 0 {
			under[uid] = true
		}
	}
	return under
}

// Prefer keeps, of the ranked candidates, those under pressure, in their
// order, when there is any; otherwise all of them. A pod that stalls is
// one that is allocating or whose pages are being taken: the pressure is
// attributable to it; evicting an idle pod, however large, leaves the one
// that allocates to go on.
func Prefer(cands []rank.Candidate, under map[types.UID]bool) []rank.Candidate {
	var kept []rank.Candidate
	for _, c := range cands {
		if under[c.Pod.UID] {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		return cands
	}
	return kept
}

func maxAverages(a, b psi.Averages) psi.Averages {
	return psi.Averages{Avg10: max(a.Avg10, b.Avg10), Avg60: max(a.Avg60, b.Avg60), Avg300: max(a.Avg300, b.Avg300), Total: max(a.Total, b.Total)}
}

func minAverages(a, b psi.Averages) psi.Averages {
	return psi.Averages{Avg10: min(a.Avg10, b.Avg10), Avg60: min(a.Avg60, b.Avg60), Avg300: min(a.Avg300, b.Avg300), Total: min(a.Total, b.Total)}
}
