package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestCanaryHaltPinAndFixWithRealBashible proves the rollout features of
// a NodeGroup's spec.update between the real node-manager-controller and
// the real bashible.sh on five simulated nodes (one canary, a soak,
// maxConcurrent 4): a good change reaches the canary first, then the rest;
// a change whose step fails halts after the canary, the halt naming node
// and step, and no other node takes it; pinning the previous revision
// brings the canary back to the previous checksum; a fix resumes the
// rollout over all five.
func TestCanaryHaltPinAndFixWithRealBashible(t *testing.T) {
	t.Parallel()
	runsRealBashible(t)
	const group = "canary-real"
	t.Cleanup(func() {
		framework.Poll(t, "the deleted group's bundle gone", func(ctx context.Context) (bool, error) {
			sum, err := f.ServedChecksum(ctx, group)
			return sum == "", err
		})
	})
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		mc := intstr.FromInt32(4)
		s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &mc, Canaries: ptr.To(int32(1)), SoakTime: &metav1.Duration{Duration: soakTime}}
	})
	dir := t.TempDir()
	var ns []*realNode
	var names []string
	for i := range 5 {
		n := newRealNode(t, dir, fmt.Sprintf("%s-%d", group, i), group)
		ns, names = append(ns, n), append(names, n.Name)
	}
	joined := f.Checksum(t, group)
	runEach(t, runLimit, ns...)
	f.WaitRolledOut(t, group, joined, 5)
	tl := recordTimeline(t, group)

	// (1) A good change: the canary alone, soaked, then the other four.
	start := time.Now()
	mark := tl.now()
	good := f.NewConfiguration(t, group, "echo good change\n")
	runEach(t, runLimit, ns...)
	f.WaitRolledOut(t, group, good, 5)
	canary := checkCanaryFirst(t, tl, group, names, good, mark)
	t.Logf("(1) %.12s rolled out over 5 nodes running bashible.sh, canary %s first, in %s", good, canary, time.Since(start).Round(time.Millisecond))

	// (2) A step that fails: the canary's run fails, the rollout halts on
	// it, and the others' runs wait unapproved until they are stopped.
	start = time.Now()
	mark = tl.now()
	bad := f.NewConfiguration(t, group, "echo the broken step fails >&2\nexit 1\n")
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop) // a failure before stop() below ends the waiting runs
	var runs []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rs, errs := runAll(ctx, ns, "--max-retries", "2")
		for i, r := range rs {
			runs = append(runs, errs[i])
			if errs[i] == nil && r.ExitCode == 0 {
				runs[i] = fmt.Errorf("exit 0")
			}
		}
	}()
	h := halted(t, group, metav1.ConditionTrue)
	approved := approvedSince(tl, names, mark)
	if len(approved) != 1 {
		stop()
		<-done
		t.Fatalf("approved before the halt: %v; want the canary alone", approved)
	}
	failed := approved[0]
	if h.Reason != approval.ReasonBashibleFailed {
		t.Errorf("RolloutHalted reason %s, want %s", h.Reason, approval.ReasonBashibleFailed)
	}
	for _, want := range []string{"node " + failed, "step ", group + "-step", "the broken step fails"} {
		if !strings.Contains(h.Message, want) {
			t.Errorf("RolloutHalted says %q; want it to say %q", h.Message, want)
		}
	}
	holds(t, soakTime+2*time.Second, "a halted rollout approves nobody else", func() error {
		if got := approvedSince(tl, names, mark); len(got) != 1 || got[0] != failed {
			return fmt.Errorf("approved %v; only the canary %s should be", got, failed)
		}
		return nil
	})
	stop()
	<-done
	for i, n := range ns {
		if runs[i] != nil {
			t.Errorf("bashible on %s: %v", n.Name, runs[i])
		}
		if got := strings.TrimSpace(n.Read("var/lib/bashible/configuration_checksum")); got != good {
			t.Errorf("%s stored checksum %.12s after the failing change; want the previous %.12s", n.Name, got, good)
		}
		if n.Name != failed && strings.Contains(n.Read("applied-checksums"), bad) {
			t.Errorf("%s ran steps of the failing change %.12s, though only the canary %s was approved", n.Name, bad, failed)
		}
		for _, s := range tl.since(n.Name, mark) {
			if s.checksum == bad {
				t.Errorf("%s reported the failing change %.12s at %s", n.Name, bad, s.at.Round(time.Millisecond))
				break
			}
		}
	}
	t.Logf("(2) %.12s halted on the canary %s (%q) in %s", bad, failed, h.Message, time.Since(start).Round(time.Millisecond))

	// (3) Pinned to the good revision: the canary goes back to it.
	var rev int64
	for _, r := range f.Bundle(t, group).Revisions {
		if r.Checksum == good {
			rev = r.Revision
		}
	}
	if rev == 0 {
		t.Fatalf("nodegroupbundles/%s lists no revision of checksum %.12s: %+v", group, good, f.Bundle(t, group).Revisions)
	}
	updateGroup(t, group, func(s *deckhousev1.NodeGroupSpec) { s.Update.PinnedRevision = ptr.To(rev) })
	f.WaitChecksum(t, group, func(sum string) bool { return sum == good })
	runEach(t, runLimit, ns...)
	framework.Poll(t, failed+" reports the pinned revision's checksum", func(ctx context.Context) (bool, error) {
		return annotation(ctx, failed, deckhousev1.ConfigurationChecksumAnnotation) == good, nil
	})
	f.WaitRolledOut(t, group, good, 5)
	t.Logf("(3) pinned to revision %d: the canary %s is back on %.12s", rev, failed, good)

	// (4) Unpinned, the failing step fixed: the rollout resumes, canary first.
	start = time.Now()
	updateGroup(t, group, func(s *deckhousev1.NodeGroupSpec) { s.Update.PinnedRevision = nil })
	f.WaitChecksum(t, group, func(sum string) bool { return sum == bad })
	mark = tl.now()
	fixed := f.NewConfiguration(t, group, "echo the step is fixed\n")
	runEach(t, runLimit, ns...)
	f.WaitRolledOut(t, group, fixed, 5)
	canary = checkCanaryFirst(t, tl, group, names, fixed, mark)
	halted(t, group, metav1.ConditionFalse)
	t.Logf("(4) the fix %.12s rolled out over 5 nodes, canary %s first, in %s", fixed, canary, time.Since(start).Round(time.Millisecond))
}

// checkCanaryFirst fails the test unless, since mark, exactly one node was
// approved and reported sum before any other was approved (the canary), and
// the others were approved only after its soak; it returns the canary.
func checkCanaryFirst(t *testing.T, tl *timeline, group string, names []string, sum string, mark time.Duration) string {
	t.Helper()
	p := progressOf(tl, names, sum, mark)
	if slices.ContainsFunc(p, func(x progress) bool { return x.approved == 0 || x.applied == 0 }) {
		t.Fatalf("not every node was seen approved and applying %.12s: %+v", sum, p)
	}
	canary := p[0]
	// The controller's own record names it the canary: a node merely
	// asking first (the runs start apart) is no canary without canaries.
	ng, err := f.NM.DeckhouseV1().NodeGroups().Get(framework.Context(t), group, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := approval.ParseRollout(ng); r.Checksum != sum || !slices.Equal(r.Canaries, []string{canary.node}) {
		t.Errorf("the group's rollout record of %.12s names canaries %v; want [%s]", r.Checksum, r.Canaries, canary.node)
	}
	for _, x := range p[1:] {
		if x.approved < canary.applied+soakTime-watchSlack {
			t.Errorf("%s was approved %s after the canary %s reported %.12s; want it only after the canary converged and soaked %s: %+v",
				x.node, x.approved-canary.applied, canary.node, sum, soakTime, p)
		}
	}
	return canary.node
}
