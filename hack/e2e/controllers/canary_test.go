package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// soakTime is the canary groups' soak: short, so the tests are, and long
// enough to tell a soaked approval from an eager one.
const soakTime = 2 * time.Second

// watchSlack is how much sooner than the controller the suite's watch may
// see a node apply a configuration.
const watchSlack = 300 * time.Millisecond

// canaryGroup makes a group of n agents with one canary, soakTime and
// maxConcurrent 2, rolled out on its current configuration.
func canaryGroup(t *testing.T, name string, n int) []*framework.Agent {
	t.Helper()
	newGroup(t, name, func(s *deckhousev1.NodeGroupSpec) {
		mc := intstr.FromInt32(2)
		s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &mc, Canaries: ptr.To(int32(1)), SoakTime: &metav1.Duration{Duration: soakTime}}
	})
	var agents []*framework.Agent
	for i := range n {
		agents = append(agents, f.TestAgent(t, fmt.Sprintf("%s-%d", name, i), name))
	}
	f.WaitRolledOut(t, name, f.Checksum(t, name), n)
	return agents
}

// progress is when each node was first approved, and first reported sum,
// after mark, as the timeline saw it (0: not yet).
type progress struct {
	node              string
	approved, applied time.Duration
}

func progressOf(tl *timeline, nodes []string, sum string, mark time.Duration) []progress {
	var out []progress
	for _, name := range nodes {
		p := progress{node: name}
		for _, s := range tl.since(name, mark) {
			if s.update["approved"] && p.approved == 0 {
				p.approved = s.at
			}
			if s.checksum == sum && p.applied == 0 {
				p.applied = s.at
			}
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b progress) int {
		switch {
		case a.approved == 0:
			return 1
		case b.approved == 0:
			return -1
		}
		return int(a.approved - b.approved)
	})
	return out
}

// approvedSince lists the nodes approved after mark.
func approvedSince(tl *timeline, nodes []string, mark time.Duration) []string {
	var out []string
	for _, name := range nodes {
		for _, s := range tl.since(name, mark) {
			if s.update["approved"] {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// agentNames are the agents' node names.
func agentNames(agents []*framework.Agent) []string {
	var out []string
	for _, a := range agents {
		out = append(out, a.Name)
	}
	return out
}

// holds fails the test as soon as check does, watching for d: an
// invariant sampled from the timeline's watch.
func holds(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// halted waits for the group's RolloutHalted condition to be status, and returns it.
func halted(t *testing.T, group string, status metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var c metav1.Condition
	framework.Poll(t, fmt.Sprintf("group %s RolloutHalted=%s", group, status), func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if h := meta.FindStatusCondition(ng.Status.Conditions, approval.ConditionRolloutHalted); h != nil && h.Status == status {
			c = *h
			return true, nil
		}
		return false, nil
	})
	return c
}

// haltedMetric waits for node_manager_rollout_halted of the group to be want.
func haltedMetric(t *testing.T, group, want string) {
	t.Helper()
	series := fmt.Sprintf("node_manager_rollout_halted{node_group=%q}", group)
	framework.Poll(t, series+" = "+want, func(ctx context.Context) (bool, error) {
		v, ok, err := ctrl.Metric(ctx, series)
		return err == nil && ok && v == want, nil
	})
}

// failingRollout gives the group a configuration that every agent fails
// at step 050_broken, and waits until the rollout halts on the canary: it
// returns the configuration, the canary, and the halt.
func failingRollout(t *testing.T, group string, agents []*framework.Agent, tl *timeline) (string, *framework.Agent, metav1.Condition) {
	t.Helper()
	for _, a := range agents {
		a.Paused.Store(true) // none asks before it knows to fail
	}
	mark := tl.now()
	sum := f.NewConfiguration(t, group, "echo broken\n")
	for _, a := range agents {
		a.FailOn(t, sum, "050_broken", "E: Unable to locate package nope")
		a.Paused.Store(false)
	}
	h := halted(t, group, metav1.ConditionTrue)
	approved := approvedSince(tl, agentNames(agents), mark)
	if len(approved) != 1 {
		t.Fatalf("approved before the halt: %v; want the canary alone", approved)
	}
	canary := agents[slices.IndexFunc(agents, func(a *framework.Agent) bool { return a.Name == approved[0] })]
	if h.Reason != approval.ReasonBashibleFailed {
		t.Errorf("RolloutHalted reason %s, want %s", h.Reason, approval.ReasonBashibleFailed)
	}
	for _, want := range []string{"node " + canary.Name, "step 050_broken", "E: Unable to locate package nope", deckhousev1.ResumeRolloutAnnotation} {
		if !strings.Contains(h.Message, want) {
			t.Errorf("RolloutHalted says %q; want it to say %q", h.Message, want)
		}
	}
	f.WaitEventNote(t, group, approval.ConditionRolloutHalted, "node "+canary.Name)
	haltedMetric(t, group, "1")
	return sum, canary, h
}

// nobodyElseApproved watches for a soak and a margin that no node but the
// canary is approved after mark.
func nobodyElseApproved(t *testing.T, tl *timeline, agents []*framework.Agent, canary string, mark time.Duration) {
	t.Helper()
	holds(t, soakTime+2*time.Second, "a halted rollout approves nobody", func() error {
		if got := approvedSince(tl, agentNames(agents), mark); len(got) != 1 || got[0] != canary {
			return fmt.Errorf("approved %v; only the canary %s should be", got, canary)
		}
		return nil
	})
}

// TestCanaryGoesFirstThenSoakedBatches: a group of four with one canary,
// maxConcurrent 2 and a soak: the canary alone first; nobody else until it
// has applied the configuration and soaked; then two; the last one only
// after those two have soaked.
func TestCanaryGoesFirstThenSoakedBatches(t *testing.T) {
	t.Parallel()
	const group = "canary"
	agents := canaryGroup(t, group, 4)
	tl := recordTimeline(t, group)
	mark := tl.now()
	start := time.Now()
	sum := f.NewConfiguration(t, group, "echo canary\n")
	f.WaitRolledOut(t, group, sum, 4)
	t.Logf("4 nodes rolled out (1 canary, then batches of 2 and 1, soaks of %s) in %s", soakTime, time.Since(start).Round(time.Millisecond))
	p := progressOf(tl, agentNames(agents), sum, mark)
	for _, x := range p {
		if x.approved == 0 || x.applied == 0 {
			t.Fatalf("%s was not seen approved and applied: %+v", x.node, p)
		}
	}
	canary, batch, last := p[0], p[1:3], p[3]
	if batch[0].approved < canary.applied+soakTime-watchSlack {
		t.Errorf("%s was approved %s after the canary %s applied the configuration; the soak is %s", batch[0].node, batch[0].approved-canary.applied, canary.node, soakTime)
	}
	// In one batch: the second is approved before the first's soak could
	// have ended (not necessarily at once: an approval whose write
	// conflicted is made again, in the same batch).
	if batch[1].approved >= batch[0].applied+soakTime-watchSlack {
		t.Errorf("%s and %s should go in one batch (maxConcurrent 2): %+v", batch[0].node, batch[1].node, p)
	}
	if soaked := max(batch[0].applied, batch[1].applied) + soakTime - watchSlack; last.approved < soaked {
		t.Errorf("%s was approved before the batch before it soaked: %+v", last.node, p)
	}
	if c := halted(t, group, metav1.ConditionFalse); c.Reason != approval.ReasonRolloutProceeding {
		t.Errorf("RolloutHalted: %+v", c)
	}
}

// TestFailingCanaryHaltsTheRolloutUntilAFix: the canary's bashible run
// fails: the rollout halts, naming the node, the step and its output, with
// an Event and the metric, and nobody else is approved; a new
// configuration (the fix) resumes it, canary first.
func TestFailingCanaryHaltsTheRolloutUntilAFix(t *testing.T) {
	t.Parallel()
	const group = "canary-halt"
	agents := canaryGroup(t, group, 4)
	tl := recordTimeline(t, group)
	mark := tl.now()
	_, canary, _ := failingRollout(t, group, agents, tl)
	nobodyElseApproved(t, tl, agents, canary.Name, mark)

	start := time.Now()
	fixed := f.NewConfiguration(t, group, "echo fixed\n")
	f.WaitRolledOut(t, group, fixed, 4)
	t.Logf("the fix rolled out over 4 nodes in %s", time.Since(start).Round(time.Millisecond))
	halted(t, group, metav1.ConditionFalse)
	haltedMetric(t, group, "0")
}

// TestResumeAnnotationResumesAHaltedRollout: a halt outlives the canary's
// own recovery (its step passes on a retry: a person looks first); the
// resume annotation lets the rollout go on, and is removed.
func TestResumeAnnotationResumesAHaltedRollout(t *testing.T) {
	t.Parallel()
	const group = "canary-resume"
	agents := canaryGroup(t, group, 4)
	tl := recordTimeline(t, group)
	mark := tl.now()
	sum, canary, _ := failingRollout(t, group, agents, tl)

	for _, a := range agents {
		a.Heal() // the step's cause was passing (a mirror down): a retry passes
	}
	framework.Poll(t, canary.Name+" applies the configuration", func(ctx context.Context) (bool, error) {
		return annotation(ctx, canary.Name, deckhousev1.ConfigurationChecksumAnnotation) == sum, nil
	})
	nobodyElseApproved(t, tl, agents, canary.Name, mark)
	if c := halted(t, group, metav1.ConditionTrue); !strings.Contains(c.Message, canary.Name) {
		t.Errorf("RolloutHalted after the canary recovered: %+v", c)
	}

	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{deckhousev1.ResumeRolloutAnnotation: ""}}})
	if _, err := f.NM.DeckhouseV1().NodeGroups().Patch(framework.Context(t), group, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitRolledOut(t, group, sum, 4)
	halted(t, group, metav1.ConditionFalse)
	haltedMetric(t, group, "0")
	f.WaitEventNote(t, group, "RolloutResumed", deckhousev1.ResumeRolloutAnnotation)
	framework.Poll(t, "the resume annotation is removed", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, still := ng.Annotations[deckhousev1.ResumeRolloutAnnotation]
		return !still, nil
	})
}

// TestAHaltQuotesALongReadyMessageClipped: a canary that goes NotReady
// after applying, with a 40 KiB Ready message (a kubelet writes there what
// it likes), halts the rollout like any other: the RolloutHalted
// condition quotes the message clipped. Quoted whole, the condition was
// longer than the API allows (32768 characters), so it was never written
// and every sync of the group failed.
func TestAHaltQuotesALongReadyMessageClipped(t *testing.T) {
	t.Parallel()
	const group = "canary-long"
	// A long soak: the canary is still in its batch when it goes NotReady.
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		mc := intstr.FromInt32(2)
		s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &mc, Canaries: ptr.To(int32(1)), SoakTime: &metav1.Duration{Duration: 10 * time.Minute}}
	})
	agents := []*framework.Agent{f.TestAgent(t, group+"-0", group), f.TestAgent(t, group+"-1", group)}
	f.WaitRolledOut(t, group, f.Checksum(t, group), len(agents))
	sum := f.NewConfiguration(t, group, "echo long\n")
	var canary *framework.Agent
	framework.Poll(t, "the canary applies "+sum[:12], func(ctx context.Context) (bool, error) {
		for _, a := range agents {
			n, err := f.Kube.CoreV1().Nodes().Get(ctx, a.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == sum {
				canary = a
				return true, nil
			}
		}
		return false, nil
	})
	long := strings.Repeat("ж", 100) + strings.Repeat("x", 40*1024)
	canary.ReadyMessage.Store(&long)
	canary.Ready.Store(false)
	h := halted(t, group, metav1.ConditionTrue)
	if h.Reason != approval.ReasonNodeNotReady || !strings.Contains(h.Message, "node "+canary.Name) {
		t.Errorf("RolloutHalted %s: %.300s; want %s naming %s", h.Reason, h.Message, approval.ReasonNodeNotReady, canary.Name)
	}
	if len(h.Message) > 2*approval.MaxNodeText || !strings.Contains(h.Message, "жxx") ||
		!strings.Contains(h.Message, "x…") ||
		!strings.Contains(h.Message, deckhousev1.ResumeRolloutAnnotation) {
		t.Errorf("RolloutHalted message of %d bytes: %.300s…; want the node's message clipped to %d bytes, and how to resume",
			len(h.Message), h.Message, approval.MaxNodeText)
	}
}
