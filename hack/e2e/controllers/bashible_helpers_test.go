package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// realNode is a simulated node (docs/development/architecture.md, "Proving
// it on a local control plane") that runs the real bashible.sh served for
// its group; a goroutine plays its kubelet's heartbeat. Every run's output
// is kept and printed if the test fails.
type realNode struct {
	*stack.SimNode
	mu   sync.Mutex
	runs []string
}

// realBashible holds a slot for each test running the real bashible.sh.
// Those tests are bound by the CPU (a run starts hundreds of processes):
// all four at once, beside the rest of the suite and two other suites on
// a loaded 2-core machine, made each run take minutes; two at a time keep
// a run's pace while the light tests go on around them.
var realBashible = make(chan struct{}, 2)

// runsRealBashible waits for a slot for the test, which runs the real
// bashible.sh on its nodes, and holds it until the test ends. Call it
// right after t.Parallel.
func runsRealBashible(t *testing.T) {
	t.Helper()
	realBashible <- struct{}{}
	t.Cleanup(func() { <-realBashible })
}

// newRealNode registers name in group with a root under dir and installs
// bashible.sh, as after bootstrap: its next run is its first.
func newRealNode(t *testing.T, dir, name, group string) *realNode {
	t.Helper()
	ctx := framework.Context(t)
	sn, err := stack.NewSimNode(ctx, f.CP, dir, name, group)
	if err != nil {
		t.Fatal(err)
	}
	// A node waiting for approval (or for its disruption) watches its
	// Node (bb-node-wait-annotation) and polls only when the watch is
	// refused. The poll here is longer than runLimit, so these tests prove
	// the watch against the real kube-apiserver, as the node's own
	// identity: a node reduced to polling never sees its approval in time.
	// (Polling every second, a dozen nodes took as much CPU as the runs
	// they waited for.)
	sn.Env = append(sn.Env, "BASHIBLE_POLL_SECONDS=600")
	n := &realNode{SimNode: sn}
	t.Cleanup(func() {
		if t.Failed() {
			n.mu.Lock()
			t.Logf("bashible runs on %s:\n%s", name, strings.Join(n.runs, "\n"))
			n.mu.Unlock()
		}
		_ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = f.NM.DeckhouseV1alpha1().Instances().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if err := f.ReportNodeReady(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A kubelet's status period: a faster heartbeat would bump the
		// Node's resourceVersion under bashible's compare-and-set writes
		// and make them conflict again and again on a loaded machine.
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-tick.C:
				_ = f.ReportNodeReady(hctx, name, true)
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	if err := sn.FetchAgent(ctx, f.CP); err != nil {
		t.Fatal(err)
	}
	return n
}

// runLimit bounds a round of bashible runs: generous, as a run of the real
// bashible.sh (hundreds of processes, forty API calls) takes a minute or
// more on a loaded 2-core machine with the suite's tests in parallel, and
// in a round the nodes' updates may go one after another (maxConcurrent 1,
// a drain, a reboot). It only ends a run that hangs.
const runLimit = 8 * time.Minute

// runEach runs bashible.sh once on every node at the same time, as their
// timers would fire, and returns the runs in the nodes' order once all have
// ended. A run still going after limit is killed. Any run that could not
// start, or did not exit 0, fails the test with its output.
func runEach(t *testing.T, limit time.Duration, ns ...*realNode) []stack.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	runs, errs := runAll(ctx, ns)
	for i, n := range ns {
		switch {
		case errs[i] != nil:
			t.Fatalf("bashible on %s: %v\n%s", n.Name, errs[i], runs[i].Output)
		case ctx.Err() != nil && runs[i].ExitCode != 0:
			t.Fatalf("bashible on %s was still running after %s (killed):\n%s", n.Name, limit, runs[i].Output)
		case runs[i].ExitCode != 0:
			t.Fatalf("bashible on %s exited %d:\n%s", n.Name, runs[i].ExitCode, runs[i].Output)
		}
	}
	return runs
}

// runAll runs bashible.sh (with args) once on every node at the same time
// and returns the runs, and the errors of those that could not start, in
// the nodes' order once all have ended; a run still going when ctx ends is
// killed. Every run's output is kept for the failure log.
func runAll(ctx context.Context, ns []*realNode, args ...string) ([]stack.Run, []error) {
	runs := make([]stack.Run, len(ns))
	errs := make([]error, len(ns))
	var wg sync.WaitGroup
	for i, n := range ns {
		wg.Go(func() {
			runs[i], errs[i] = n.RunOnce(ctx, args...)
			n.mu.Lock()
			defer n.mu.Unlock()
			n.runs = append(n.runs, fmt.Sprintf("--- run %d: exit %d after %s (error %v)\n%s",
				len(n.runs)+1, runs[i].ExitCode, runs[i].Took.Round(time.Millisecond), errs[i], runs[i].Output))
		})
	}
	wg.Wait()
	return runs, errs
}

// nodeState is what a node showed of the update protocol at one moment.
type nodeState struct {
	at time.Duration
	// update holds the node's update.node.deckhouse.io/ annotations, by
	// their short names (approved, drained, ...).
	update   map[string]bool
	checksum string
	cordoned bool
}

func (s nodeState) String() string {
	var keys []string
	for k := range s.update {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := fmt.Sprintf("checksum=%.12s", s.checksum)
	if s.checksum == "" {
		out = "checksum=none"
	}
	if len(keys) > 0 {
		out += " [" + strings.Join(keys, " ") + "]"
	}
	if s.cordoned {
		out += " cordoned"
	}
	return out
}

// timeline records every distinct protocol state of a group's nodes, from
// a watch; the test reads it for the order of events and prints it if it
// fails.
type timeline struct {
	mu     sync.Mutex
	start  time.Time
	states map[string][]nodeState
	lines  []string
}

func recordTimeline(t *testing.T, group string) *timeline {
	t.Helper()
	tl := &timeline{start: time.Now(), states: map[string][]nodeState{}}
	f.WatchNodes(t, group, func(typ watch.EventType, n *corev1.Node) {
		if typ == watch.Deleted {
			return
		}
		s := nodeState{at: time.Since(tl.start), update: map[string]bool{},
			checksum: n.Annotations[deckhousev1.ConfigurationChecksumAnnotation], cordoned: n.Spec.Unschedulable}
		for k := range n.Annotations {
			if short, ok := strings.CutPrefix(k, deckhousev1.UpdateAnnotationPrefix); ok {
				s.update[short] = true
			}
		}
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if h := tl.states[n.Name]; len(h) == 0 || h[len(h)-1].String() != s.String() {
			tl.states[n.Name] = append(h, s)
			tl.lines = append(tl.lines, fmt.Sprintf("%8s %s: %s", s.at.Round(time.Millisecond), n.Name, s))
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("timeline of group %s:\n%s", group, tl)
		}
	})
	return tl
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "\n")
}

// since returns the states of node recorded at or after mark.
func (tl *timeline) since(node string, mark time.Duration) []nodeState {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []nodeState
	for _, s := range tl.states[node] {
		if s.at >= mark {
			out = append(out, s)
		}
	}
	return out
}

// now is the timeline's clock, to mark the start of a phase.
func (tl *timeline) now() time.Duration { return time.Since(tl.start) }
