package fencing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencing"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// A CloudPermanent node whose Lease goes stale: once the evacuation delay
// has passed since its last renewal (never before: its watchdog must have
// fired), its pods — one running, one stuck terminating as on a dead
// kubelet — are force-deleted, and then its Node is deleted. The time from
// the last renewal to the pods being freed is logged.
func TestADeadNodesPodsAreFreedAndItsNodeDeleted(t *testing.T) {
	fencedGroup(t, "cloud", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	hb := fencedNode(t, "cloud-0", "cloud", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog, nil)
	podOn(t, "cloud-0", "cloud-app")
	podOn(t, "cloud-0", "cloud-stuck")
	grace := int64(3600)
	if err := f.Kube.CoreV1().Pods(metav1.NamespaceDefault).Delete(framework.Context(t), "cloud-stuck", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, "cloud", metav1.ConditionFalse, fencing.ReasonNotHeld)

	last := hb.Pause()
	framework.Poll(t, "the dead node's pods freed", func(ctx context.Context) (bool, error) {
		for _, p := range []string{"cloud-app", "cloud-stuck"} {
			if gone, err := podGone(ctx, p); !gone || err != nil {
				return false, err
			}
		}
		return true, nil
	})
	freed := time.Since(last)
	t.Logf("pods freed %s after the node's last Lease renewal (evacuation delay %s = watchdog timeout %s + margin %s)",
		freed.Round(time.Millisecond), delay, watchdogTimeout, margin)
	if freed <= delay {
		t.Errorf("the pods were freed %s after the last renewal, before the evacuation delay of %s: the watchdog may not have fired", freed, delay)
	}
	framework.Poll(t, "the dead node's Node deleted", func(ctx context.Context) (bool, error) { return nodeGone(ctx, "cloud-0") })

	f.WaitEventNote(t, "cloud-0", fencing.ReasonFenced, "its Node deleted")
	f.WaitEventNote(t, "cloud", fencing.ReasonFenced, "node cloud-0 has not renewed its Lease")
	waitMetric(t, `node_manager_fencing_fenced_total{node_group="cloud"}`, "1")
}

// A Static node's pods are freed too, but its Node stays, marked fenced
// at its last renewal; once the node renews its Lease again (it rebooted
// and rejoined), the mark goes.
func TestAStaticNodeKeepsItsNode(t *testing.T) {
	fencedGroup(t, "static", deckhousev1.NodeTypeStatic, deckhousev1.FencingModeWatchdog)
	hb := fencedNode(t, "static-0", "static", deckhousev1.NodeTypeStatic, deckhousev1.FencingModeWatchdog, nil)
	podOn(t, "static-0", "static-app")

	hb.Pause()
	framework.Poll(t, "the dead Static node's pod freed", func(ctx context.Context) (bool, error) { return podGone(ctx, "static-app") })
	f.WaitEventNote(t, "static-0", fencing.ReasonFenced, "its Node kept (a Static node keeps its Node so it can rejoin)")
	framework.Poll(t, "the Static node marked fenced", func(ctx context.Context) (bool, error) {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, "static-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[deckhousev1.FencedAnnotation]
		return ok, nil
	})

	hb.Resume()
	framework.Poll(t, "the fenced mark removed once the node renews its Lease", func(ctx context.Context) (bool, error) {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, "static-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[deckhousev1.FencedAnnotation]
		return !ok, nil
	})
	f.WaitEventNote(t, "static-0", fencing.ReasonFenced, "")
	if notes := f.EventNotes(t, "static-0", fencing.ReasonFenced); len(notes) != 1 {
		t.Errorf("the node was fenced %d times, want once: %q", len(notes), notes)
	}
}

// A node in Notify mode (no watchdog) has its pods freed and keeps its Node.
func TestANotifyNodeKeepsItsNode(t *testing.T) {
	fencedGroup(t, "notify", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeNotify)
	hb := fencedNode(t, "notify-0", "notify", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeNotify, nil)
	podOn(t, "notify-0", "notify-app")

	hb.Pause()
	framework.Poll(t, "the dead Notify node's pod freed", func(ctx context.Context) (bool, error) { return podGone(ctx, "notify-app") })
	f.WaitEventNote(t, "notify-0", fencing.ReasonFenced, "its Node kept (fencing mode Notify)")
	if gone, err := nodeGone(framework.Context(t), "notify-0"); gone || err != nil {
		t.Errorf("the Notify node's Node is gone (%v), want it kept", err)
	}
}

// A node in maintenance (fencing-disable) whose Lease goes stale is left
// alone, and says so.
func TestANodeInMaintenanceIsNotFenced(t *testing.T) {
	fencedGroup(t, "maint", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	hb := fencedNode(t, "maint-0", "maint", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog,
		map[string]string{deckhousev1.FencingDisableAnnotation: ""})
	podOn(t, "maint-0", "maint-app")

	hb.Pause()
	f.WaitEventNote(t, "maint-0", fencing.ReasonSkipped, "("+fencing.ReasonMaintenance+")")
	f.WaitEventNote(t, "maint", fencing.ReasonSkipped, "node maint-0 is not fenced: it carries "+deckhousev1.FencingDisableAnnotation)
	if gone, err := podGone(framework.Context(t), "maint-app"); gone || err != nil {
		t.Errorf("the pod of a node in maintenance is gone (%v)", err)
	}
	if gone, err := nodeGone(framework.Context(t), "maint-0"); gone || err != nil {
		t.Errorf("the Node of a node in maintenance is gone (%v)", err)
	}
}

// Five nodes of a group of eleven die at once (a minority of the group,
// so its quorum guard does not hold, and of all fenced nodes, so the
// outage guard does not): the cap of one node per interval fences them one
// interval apart, oldest first, while the group's FencingHeld condition
// and metric say the cap holds the rest.
func TestFiveDeadNodesAreFencedOnePerInterval(t *testing.T) {
	fencedGroup(t, "capped", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	var dying []*framework.Heartbeat
	for i := range 11 {
		hb := fencedNode(t, fmt.Sprintf("capped-%d", i), "capped", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog, nil)
		if i < 5 {
			dying = append(dying, hb)
		}
	}
	waitHeld(t, "capped", metav1.ConditionFalse, fencing.ReasonNotHeld)

	var last time.Time
	for _, hb := range dying {
		last = hb.Pause()
	}
	gone := map[string]time.Time{}
	sawHeld, sawCondition := false, false
	framework.Poll(t, "the five dead nodes fenced", func(ctx context.Context) (bool, error) {
		for i := range 5 {
			name := fmt.Sprintf("capped-%d", i)
			if _, ok := gone[name]; ok {
				continue
			}
			if g, err := nodeGone(ctx, name); err != nil {
				return false, err
			} else if g {
				gone[name] = time.Now()
			}
		}
		if len(gone) > 0 && len(gone) < 4 {
			if !sawHeld {
				v, ok, err := ctrl.Metric(ctx, `node_manager_fencing_held{node_group="capped",reason="BlastRadiusCap"}`)
				if err != nil {
					return false, err
				}
				sawHeld = ok && v == "1"
			}
			if !sawCondition {
				ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "capped", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				c := meta.FindStatusCondition(ng.Status.Conditions, fencing.ConditionFencingHeld)
				sawCondition = c != nil && c.Status == metav1.ConditionTrue && c.Reason == fencing.ReasonBlastRadiusCap
			}
		}
		return len(gone) == 5, nil
	})
	if !sawHeld {
		t.Error("node_manager_fencing_held{reason=BlastRadiusCap} was never 1 while the cap held dead nodes")
	}
	if !sawCondition {
		t.Errorf("the group's %s condition never said %s while the cap held dead nodes", fencing.ConditionFencingHeld, fencing.ReasonBlastRadiusCap)
	}
	var times []time.Time
	for _, at := range gone {
		times = append(times, at)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var gaps []string
	for i, at := range times {
		gaps = append(gaps, at.Sub(last).Round(100*time.Millisecond).String())
		// The controller starts each fencing an interval after the last;
		// the watch here sees the deletions a little later or earlier.
		if i > 0 && at.Sub(times[i-1]) < interval-500*time.Millisecond {
			t.Errorf("nodes fenced %s apart, within the cap's interval of %s", at.Sub(times[i-1]), interval)
		}
	}
	t.Logf("the five nodes were deleted at %s after their last renewal", strings.Join(gaps, ", "))
	f.WaitEventNote(t, "capped", fencing.ReasonSkipped, "("+fencing.ReasonBlastRadiusCap+")")
	waitHeld(t, "capped", metav1.ConditionFalse, fencing.ReasonNotHeld)
}

// Every node of a group stops renewing at once: that is an outage of the
// control plane or the network to it, not five dead machines, so nobody is
// fenced; the group's condition, an Event per node and the guard's metric
// say so. When most nodes renew again, the one still dead is fenced.
func TestNobodyIsFencedWhenAllLeasesGoStaleAtOnce(t *testing.T) {
	fencedGroup(t, "outage", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	var hbs []*framework.Heartbeat
	for i := range 3 {
		name := fmt.Sprintf("outage-%d", i)
		hbs = append(hbs, fencedNode(t, name, "outage", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog, nil))
		podOn(t, name, name+"-app")
	}
	waitHeld(t, "outage", metav1.ConditionFalse, fencing.ReasonNotHeld)

	for _, hb := range hbs {
		hb.Pause()
	}
	waitHeld(t, "outage", metav1.ConditionTrue, fencing.ReasonClusterOutage)
	// The hold begins once a majority is silent, which may be two of the
	// three Leases (paused one after the other); the message then counts
	// all three.
	framework.Poll(t, "the outage condition to count the three silent nodes", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "outage", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ng.Status.Conditions, fencing.ConditionFencingHeld)
		return c != nil && c.Reason == fencing.ReasonClusterOutage && strings.Contains(c.Message, "3 of 3 fenced nodes"), nil
	})
	waitMetric(t, `node_manager_fencing_outage_guard{state="ClusterOutage"}`, "1")
	for i := range 3 {
		name := fmt.Sprintf("outage-%d", i)
		f.WaitEventNote(t, name, fencing.ReasonSkipped, "("+fencing.ReasonClusterOutage+")")
		if gone, err := podGone(framework.Context(t), name+"-app"); gone || err != nil {
			t.Errorf("pod %s-app was deleted during an outage (%v)", name, err)
		}
		if gone, err := nodeGone(framework.Context(t), name); gone || err != nil {
			t.Errorf("node %s was deleted during an outage (%v)", name, err)
		}
	}

	// Two come back: one dead of three is no outage.
	hbs[0].Resume()
	hbs[1].Resume()
	framework.Poll(t, "the node still dead fenced once the picture is consistent", func(ctx context.Context) (bool, error) {
		return nodeGone(ctx, "outage-2")
	})
	waitMetric(t, `node_manager_fencing_outage_guard{state="ok"}`, "1")
	for _, name := range []string{"outage-0", "outage-1"} {
		if gone, err := nodeGone(framework.Context(t), name); gone || err != nil {
			t.Errorf("node %s, alive again, was deleted (%v)", name, err)
		}
	}
}

// Three nodes of a group of five stop renewing at once: a majority of the
// group, which may be alive and cut off from the control plane together,
// its agents feeding their watchdogs as long as they see each other, so
// none of the group is fenced; the group's condition, an Event per node
// and the held metric say so. Two bystander nodes of another group keep
// the three a minority of all fenced nodes, so the outage guard does not
// hold. When two of the three renew again, the one still silent is a
// minority of one and is fenced.
func TestAGroupWhoseMajorityStopsRenewingIsNotFenced(t *testing.T) {
	fencedGroup(t, "quorum", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	fencedGroup(t, "bystanders", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	for i := range 2 {
		fencedNode(t, fmt.Sprintf("bystander-%d", i), "bystanders", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog, nil)
	}
	var hbs []*framework.Heartbeat
	for i := range 5 {
		name := fmt.Sprintf("quorum-%d", i)
		hbs = append(hbs, fencedNode(t, name, "quorum", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog, nil))
		podOn(t, name, name+"-app")
	}
	waitHeld(t, "quorum", metav1.ConditionFalse, fencing.ReasonNotHeld)

	var last time.Time
	for _, hb := range hbs[:3] {
		last = hb.Pause()
	}
	c := waitHeld(t, "quorum", metav1.ConditionTrue, fencing.ReasonGroupQuorumLost)
	if !strings.Contains(c.Message, "3 of the 5 fenced nodes of group quorum") {
		t.Errorf("condition message %q should count the silent nodes of the group", c.Message)
	}
	waitMetric(t, `node_manager_fencing_held{node_group="quorum",reason="GroupQuorumLost"}`, "1")
	waitMetric(t, `node_manager_fencing_outage_guard{state="ok"}`, "1")
	for i := range 3 {
		f.WaitEventNote(t, fmt.Sprintf("quorum-%d", i), fencing.ReasonSkipped, "("+fencing.ReasonGroupQuorumLost+")")
	}
	waitHeld(t, "bystanders", metav1.ConditionFalse, fencing.ReasonNotHeld)
	// Past the delay and a cap interval more, nothing of the group is freed.
	time.Sleep(time.Until(last.Add(delay + interval)))
	for i := range 5 {
		name := fmt.Sprintf("quorum-%d", i)
		if gone, err := podGone(framework.Context(t), name+"-app"); gone || err != nil {
			t.Errorf("pod %s-app was deleted while a majority of its group was silent (%v)", name, err)
		}
		if gone, err := nodeGone(framework.Context(t), name); gone || err != nil {
			t.Errorf("node %s was deleted while a majority of its group was silent (%v)", name, err)
		}
	}

	// Two come back: one silent node of five is a minority, cut off alone.
	hbs[0].Resume()
	hbs[1].Resume()
	framework.Poll(t, "the node still silent fenced once it is a minority", func(ctx context.Context) (bool, error) {
		return nodeGone(ctx, "quorum-2")
	})
	if gone, err := podGone(framework.Context(t), "quorum-2-app"); !gone || err != nil {
		t.Errorf("the fenced node's pod is still there (%v)", err)
	}
	waitHeld(t, "quorum", metav1.ConditionFalse, fencing.ReasonNotHeld)
	for _, name := range []string{"quorum-0", "quorum-1", "quorum-3", "quorum-4"} {
		if gone, err := nodeGone(framework.Context(t), name); gone || err != nil {
			t.Errorf("node %s, alive, was deleted (%v)", name, err)
		}
	}
}

// When the controller sees no node renew its Lease at all (here: the
// control-plane node pauses too), its own view of the API is stale and it
// fences nobody; when renewals come again, it fences the dead node.
func TestNobodyIsFencedWhileTheControllersViewIsStale(t *testing.T) {
	fencedGroup(t, "view", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	hb := fencedNode(t, "view-0", "view", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog, nil)
	waitHeld(t, "view", metav1.ConditionFalse, fencing.ReasonNotHeld)

	controlPlane.Pause()
	t.Cleanup(controlPlane.Resume)
	hb.Pause()
	waitHeld(t, "view", metav1.ConditionTrue, fencing.ReasonStaleAPIView)
	waitMetric(t, `node_manager_fencing_outage_guard{state="StaleAPIView"}`, "1")
	f.WaitEventNote(t, "view-0", fencing.ReasonSkipped, "("+fencing.ReasonStaleAPIView+")")
	if gone, err := nodeGone(framework.Context(t), "view-0"); gone || err != nil {
		t.Errorf("node view-0 was deleted while the controller's view was stale (%v)", err)
	}

	controlPlane.Resume()
	framework.Poll(t, "the dead node fenced once renewals are seen again", func(ctx context.Context) (bool, error) {
		return nodeGone(ctx, "view-0")
	})
}

// The fencing controller applies FencingHeld with its own field manager,
// so the nodegroup-status controller's conditions (applied with Force by
// node-manager-controller's) and FencingHeld survive each other's writes:
// after a spec change both are rewritten for the new generation, and
// both are there.
func TestFencingHeldLivesBesideTheStatusConditions(t *testing.T) {
	fencedGroup(t, "both", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog)
	fencedNode(t, "both-0", "both", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeWatchdog, nil)
	waitBoth := func(generation int64) {
		t.Helper()
		framework.Poll(t, fmt.Sprintf("group both: Ready and %s at generation %d", fencing.ConditionFencingHeld, generation), func(ctx context.Context) (bool, error) {
			ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "both", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ready := meta.FindStatusCondition(ng.Status.Conditions, "Ready")
			held := meta.FindStatusCondition(ng.Status.Conditions, fencing.ConditionFencingHeld)
			return ng.Generation == generation && ready != nil && held != nil &&
				ready.ObservedGeneration == generation && held.ObservedGeneration == generation, nil
		})
	}
	ng, err := f.NM.DeckhouseV1().NodeGroups().Get(framework.Context(t), "both", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitBoth(ng.Generation)

	framework.Poll(t, "a longer watchdog timeout for group both", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "both", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ng.Spec.Fencing.Watchdog.Timeout = "3s"
		_, err = f.NM.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{})
		return err == nil, nil
	})
	waitBoth(ng.Generation + 1)
	c := waitHeld(t, "both", metav1.ConditionFalse, fencing.ReasonNotHeld)
	if !strings.Contains(c.Message, "5s") {
		t.Errorf("FencingHeld says %q; with a 3 s watchdog and a 2 s margin the delay is 5s", c.Message)
	}
}
