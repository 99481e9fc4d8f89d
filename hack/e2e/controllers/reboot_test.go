package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestRebootRequestsWithRealBashible: a person asks every node of a group
// to reboot at once. Between the real node-manager-controller and the real
// bashible.sh, each node waits for update approval, is drained, reboots
// exactly once, and comes back to report its configuration and clear the
// request — one node at a time (maxConcurrent 1): never more than one node
// approved or disrupted at once.
func TestRebootRequestsWithRealBashible(t *testing.T) {
	t.Parallel()
	runsRealBashible(t)
	const group = "reboots"
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		one := intstr.FromInt32(1)
		s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &one}
		s.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalAutomatic}
	})
	dir := t.TempDir()
	ns := []*realNode{newRealNode(t, dir, "reboots-0", group), newRealNode(t, dir, "reboots-1", group), newRealNode(t, dir, "reboots-2", group)}
	sum := f.Checksum(t, group)
	runEach(t, runLimit, ns...)
	f.WaitRolledOut(t, group, sum, 3)

	tl := recordTimeline(t, group)
	peak := watchDisrupted(t, group)
	mark := tl.now()
	for _, n := range ns {
		// The reboot command counts its calls and gives the machine a new
		// boot id (not the first one, 1), as a real reboot does.
		if err := n.Write("reboot.sh", `echo reboot >> "$1/reboots"
printf '00000000-0000-4000-8000-%012d\n' "$(( $(wc -l < "$1/reboots") + 100 ))" > "$1/proc/sys/kernel/random/boot_id"
`); err != nil {
			t.Fatal(err)
		}
		n.Env = append(n.Env, "BASHIBLE_REBOOT_COMMAND=bash "+n.Path("reboot.sh")+" "+n.Root)
		annotate(t, n.Name, map[string]*string{deckhousev1.RebootAnnotation: ptr.To("")})
	}

	// Every node's timer fires, again and again, until the node is back
	// from its reboot and has reported.
	done := func(n *realNode) bool {
		ctx := framework.Context(t)
		return n.Exists("reboots") && !has(ctx, n.Name, deckhousev1.RebootAnnotation) && annotation(ctx, n.Name, deckhousev1.ConfigurationChecksumAnnotation) == sum
	}
	var wg sync.WaitGroup
	for _, n := range ns {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), runLimit)
			defer cancel()
			for !done(n) && ctx.Err() == nil {
				run, err := n.RunOnce(ctx)
				n.mu.Lock()
				n.runs = append(n.runs, fmt.Sprintf("--- run %d: exit %d after %s (error %v)\n%s",
					len(n.runs)+1, run.ExitCode, run.Took.Round(time.Millisecond), err, run.Output))
				n.mu.Unlock()
				if err != nil || run.ExitCode != 0 {
					t.Errorf("bashible on %s: exit %d (%v)", n.Name, run.ExitCode, err)
					return
				}
			}
		})
	}
	wg.Wait()

	for _, n := range ns {
		if got := n.Read("reboots"); got != "reboot\n" {
			t.Errorf("%s: reboot command calls %q, want exactly one", n.Name, got)
		}
		if !done(n) {
			t.Errorf("%s did not come back from its reboot and report %.12s with the request cleared", n.Name, sum)
		}
		var asked bool
		for _, s := range tl.since(n.Name, mark) {
			asked = asked || s.update["waiting-for-approval"] && s.checksum == ""
		}
		if !asked {
			t.Errorf("%s rebooted without asking for update approval", n.Name)
		}
		checkDrainedBeforeDisruption(t, tl, mark, n.Name)
	}
	f.WaitRolledOut(t, group, sum, 3) // all uncordoned, no annotation left
	if approved, disrupted := peak(); approved > 1 || disrupted > 1 {
		t.Errorf("at most %d nodes approved and %d disrupted at once; maxConcurrent 1 allows one", approved, disrupted)
	}
}

// watchDisrupted follows the group's nodes and returns a function that
// tells the most nodes seen approved, and disrupted (approval.Disrupted),
// at once.
func watchDisrupted(t *testing.T, group string) func() (int, int) {
	t.Helper()
	var mu sync.Mutex
	state := map[string]*corev1.Node{}
	var maxApproved, maxDisrupted int
	f.WatchNodes(t, group, func(typ watch.EventType, n *corev1.Node) {
		mu.Lock()
		defer mu.Unlock()
		if typ == watch.Deleted {
			delete(state, n.Name)
		} else {
			state[n.Name] = n
		}
		var approved, disrupted []string
		for _, s := range state {
			if nodes.Has(s, deckhousev1.ApprovedAnnotation) {
				approved = append(approved, s.Name)
			}
			if approval.Disrupted(s) {
				disrupted = append(disrupted, s.Name)
			}
		}
		maxApproved, maxDisrupted = max(maxApproved, len(approved)), max(maxDisrupted, len(disrupted))
		if len(disrupted) > 1 {
			t.Logf("disrupted at once: %s", strings.Join(disrupted, ", "))
		}
	})
	return func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return maxApproved, maxDisrupted
	}
}
