package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestRolloutWithRealBashible runs the update protocol end to end between
// the real node-manager-controller and the real bashible.sh on three
// simulated nodes: each run asks for approval and waits, the controller
// approves one node at a time (maxConcurrent 1), each run applies the
// configuration and reports its checksum, and the controller clears the
// annotations. Then one node's update needs a disruption: in Automatic
// mode the controller drains it, approves the disruption, and uncordons
// the node once it has applied the configuration.
func TestRolloutWithRealBashible(t *testing.T) {
	t.Parallel()
	runsRealBashible(t)
	const group = "real"
	// Runs after the group's deletion: the next test (or -count) with this
	// name starts without the old group's bundle.
	t.Cleanup(func() {
		framework.Poll(t, "the deleted group's bundle gone", func(ctx context.Context) (bool, error) {
			sum, err := f.ServedChecksum(ctx, group)
			return sum == "", err
		})
	})
	newGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		one := intstr.FromInt32(1)
		s.Update = &deckhousev1.UpdateSpec{MaxConcurrent: &one}
		s.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalAutomatic}
	})
	dir := t.TempDir()
	ns := []*realNode{newRealNode(t, dir, "real-0", group), newRealNode(t, dir, "real-1", group), newRealNode(t, dir, "real-2", group)}
	tl := recordTimeline(t, group)
	m := f.WatchGroup(t, group)

	// Joining: the first runs converge without asking for approval.
	joined := f.Checksum(t, group)
	runEach(t, runLimit, ns...)
	f.WaitRolledOut(t, group, joined, 3)
	m.Check(t, 0)
	for _, n := range ns {
		for _, s := range tl.since(n.Name, 0) {
			if len(s.update) > 0 {
				t.Errorf("%s's first run took part in the update protocol: %s", n.Name, s)
				break
			}
		}
	}

	// A new configuration: every node's run asks, one is approved at a time.
	m.Reset()
	mark := tl.now()
	start := time.Now()
	sum := f.NewConfiguration(t, group, "echo real bashible 1\n")
	for i, run := range runEach(t, runLimit, ns...) {
		n := ns[i]
		if !strings.Contains(run.Output, fmt.Sprintf("configuration %.12s applied", sum)) {
			t.Errorf("the run on %s should apply %.12s:\n%s", n.Name, sum, run.Output)
		}
		if got := strings.TrimSpace(n.Read("var/lib/bashible/configuration_checksum")); got != sum {
			t.Errorf("%s stored checksum %.12s, want %.12s", n.Name, got, sum)
		}
		if !strings.Contains(n.Read("applied-checksums"), sum) {
			t.Errorf("%s did not run the steps of %.12s", n.Name, sum)
		}
		// The node asked the protocol's way (waiting, its checksum removed)
		// and reported the new checksum only once approved.
		var asked, approved bool
		for _, s := range tl.since(n.Name, mark) {
			asked = asked || s.update["waiting-for-approval"] && s.checksum == ""
			approved = approved || s.update["approved"]
			if s.checksum == sum && !approved {
				t.Errorf("%s reported %.12s at %s without having been approved", n.Name, sum, s.at.Round(time.Millisecond))
			}
			if s.update["approved"] && s.update["waiting-for-approval"] {
				t.Errorf("%s asked for approval again after it was approved (at %s)", n.Name, s.at.Round(time.Millisecond))
			}
		}
		if !asked {
			t.Errorf("%s never showed waiting-for-approval without a checksum", n.Name)
		}
	}
	f.WaitRolledOut(t, group, sum, 3)
	m.Check(t, 1)
	if m.MaxApproved() != 1 {
		t.Errorf("at most %d nodes were approved at once; the controller should have approved each of the three, one at a time", m.MaxApproved())
	}
	checkNeverCordoned(t, tl, mark, ns...)
	t.Logf("3 nodes running bashible.sh rolled out %.12s in %s, at most %d approved at once", sum, time.Since(start).Round(time.Millisecond), m.MaxApproved())

	// A disruptive update of real-1: drained, disruption approved, uncordoned.
	disrupted := ns[1]
	if err := disrupted.Control("disrupt", true); err != nil {
		t.Fatal(err)
	}
	m.Reset()
	mark = tl.now()
	start = time.Now()
	sum = f.NewConfiguration(t, group, "echo real bashible 2\n")
	for i, run := range runEach(t, runLimit, ns...) {
		n := ns[i]
		gated := false
		for _, s := range tl.since(n.Name, mark) {
			gated = gated || s.update["disruption-required"]
		}
		switch {
		case n == disrupted && (!gated || !n.Exists("disrupted")):
			t.Errorf("the run on %s should ask for a disruption, then disrupt:\n%s", n.Name, run.Output)
		case n != disrupted && (gated || n.Exists("disrupted")):
			t.Errorf("%s needed no disruption but asked for one or disrupted:\n%s", n.Name, run.Output)
		}
	}
	f.WaitRolledOut(t, group, sum, 3) // all uncordoned, no annotation left
	m.Check(t, 1)
	checkNeverCordoned(t, tl, mark, ns[0], ns[2])
	checkDrainedBeforeDisruption(t, tl, mark, disrupted.Name)
	framework.Poll(t, "events of the drain and the disruption's approval", func(ctx context.Context) (bool, error) {
		evs, err := f.Kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var requested, approved bool
		for _, e := range evs.Items {
			if e.Regarding.Name != disrupted.Name {
				continue
			}
			requested = requested || e.Reason == "DrainRequested"
			approved = approved || e.Reason == "DisruptionApproved" && strings.Contains(e.Note, "drained")
		}
		return requested && approved, nil
	})
	t.Logf("disruptive update %.12s rolled out in %s; %s was drained first", sum, time.Since(start).Round(time.Millisecond), disrupted.Name)
}

// checkNeverCordoned fails the test if a node was cordoned since mark.
func checkNeverCordoned(t *testing.T, tl *timeline, mark time.Duration, ns ...*realNode) {
	t.Helper()
	for _, n := range ns {
		for _, s := range tl.since(n.Name, mark) {
			if s.cordoned {
				t.Errorf("%s was cordoned at %s, though its update needs no disruption", n.Name, s.at.Round(time.Millisecond))
				break
			}
		}
	}
}

// checkDrainedBeforeDisruption fails the test unless node, since mark,
// asked for a disruption, was cordoned and drained before the disruption
// was approved, and ended uncordoned.
func checkDrainedBeforeDisruption(t *testing.T, tl *timeline, mark time.Duration, node string) {
	t.Helper()
	states := tl.since(node, mark)
	var asked, approved bool
	for _, s := range states {
		asked = asked || s.update["disruption-required"]
		if s.update["disruption-approved"] && !approved {
			approved = true
			if !asked || !s.update["drained"] || !s.cordoned {
				t.Errorf("%s: the disruption was approved at %s while %s; want it asked for, the node cordoned and drained", node, s.at.Round(time.Millisecond), s)
			}
		}
	}
	if !approved {
		t.Errorf("%s: no disruption was approved", node)
	}
	if len(states) == 0 || states[len(states)-1].cordoned {
		t.Errorf("%s did not end uncordoned", node)
	}
}
