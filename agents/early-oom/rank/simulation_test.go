package rank

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestRandomNodesRankByTheKubeletsRules builds random nodes and checks the
// ranking against the kubelet's rules stated pair by pair: no pod is
// ranked after one it should precede, every pod that may be evicted and
// has a cgroup is ranked, and no protected pod is.
func TestRandomNodesRankByTheKubeletsRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 2))
	priorities := []int32{-100, 0, 0, 1000, SystemCriticalPriority, SystemCriticalPriority + 1000}
	for run := 0; run < 500; run++ {
		var pods []*corev1.Pod
		usage := map[types.UID]int64{}
		for i := 0; i < 1+rng.IntN(12); i++ {
			p := pod(fmt.Sprintf("p%d", i), int64(rng.IntN(4))*256, corev1.PodQOSBurstable, priorities[rng.IntN(len(priorities))])
			switch rng.IntN(8) {
			case 0:
				mirror(p)
			case 1:
				p.Status.Phase = corev1.PodSucceeded
			}
			if rng.IntN(6) != 0 {
				usage[p.UID] = int64(rng.IntN(8)) * 128 * mi
			}
			pods = append(pods, p)
		}
		self := types.UID(fmt.Sprintf("uid-p%d", rng.IntN(len(pods))))
		ranked := Rank(pods, usage, self, 5)

		want := 0
		for _, p := range pods {
			_, protected := Protected(p, self, 5)
			_, has := usage[p.UID]
			if !protected && has {
				want++
			}
		}
		if len(ranked) != want {
			t.Fatalf("run %d: %d pods ranked; want %d", run, len(ranked), want)
		}
		for i, c := range ranked {
			if why, protected := Protected(c.Pod, self, 5); protected {
				t.Fatalf("run %d: %s ranked though %s", run, c.Pod.Name, why)
			}
			if i == 0 {
				continue
			}
			prev := ranked[i-1]
			// prev must not be one that c should precede.
			if c.ExceedsRequest() && !prev.ExceedsRequest() {
				t.Fatalf("run %d: %s (over its request) after %s (within)", run, c.Pod.Name, prev.Pod.Name)
			}
			if c.ExceedsRequest() == prev.ExceedsRequest() && c.Priority < prev.Priority {
				t.Fatalf("run %d: %s (priority %d) after %s (priority %d)", run, c.Pod.Name, c.Priority, prev.Pod.Name, prev.Priority)
			}
			if c.ExceedsRequest() == prev.ExceedsRequest() && c.Priority == prev.Priority && c.AboveRequest() > prev.AboveRequest() {
				t.Fatalf("run %d: %s (%d above request) after %s (%d)", run, c.Pod.Name, c.AboveRequest(), prev.Pod.Name, prev.AboveRequest())
			}
		}
	}
}
