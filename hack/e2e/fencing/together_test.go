package fencing

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencing"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// The agents' --lease-stale-after here: below the suite's margin, as the
// default is below the controller's least accepted margin (the agents,
// as the controller is told, check every 0.5 s, so 1.5 s).
const agentLeaseStaleAfter = "1500ms"

// watchdogFires is the suite's watchdog timeout as a duration.
const watchdogFires = 2 * time.Second

// togetherGroup starts three real fencing agents on a fenced group with the
// suite's watchdog timeout, and each node's kubelet (a framework.Heartbeat
// renewing its Lease as often as the controller is told).
func togetherGroup(t *testing.T, name string) (*framework.FencedGroup, []*framework.Heartbeat) {
	t.Helper()
	g := f.StartFencedGroup(t, name, framework.FencedGroupOptions{
		Group: func(ng *deckhousev1.NodeGroup) {
			ng.Spec.Fencing.Watchdog = &deckhousev1.WatchdogSpec{Timeout: watchdogTimeout}
		},
		AgentArgs: []string{"--lease-stale-after=" + agentLeaseStaleAfter},
	})
	var hbs []*framework.Heartbeat
	for _, node := range g.Nodes {
		hb, err := framework.StartHeartbeat(framework.Context(t), f.CP, node, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hb.Stop)
		hbs = append(hbs, hb)
	}
	waitHeld(t, name, metav1.ConditionFalse, fencing.ReasonNotHeld)
	return g, hbs
}

// The real agents and the real controller together. A node that loses the
// network to the control plane, alone (its agent's link to kube-apiserver
// cut and its kubelet silent at the same moment), is fenced: its agent
// stops feeding, since its peers still reach the API, and the controller
// frees its pods after the evacuation delay. The safety the timings
// promise is checked on the wire: the agent's last feed plus the watchdog
// timeout — when its watchdog would have reset the node — comes before the
// pods are freed.
func TestTheWatchdogFiresBeforeTheControllerFreesThePods(t *testing.T) {
	g, hbs := togetherGroup(t, "together")
	podOn(t, g.Nodes[0], "together-app")
	podOn(t, g.Nodes[1], "together-bystander")

	g.Proxies[0].Cut()
	last := hbs[0].Pause()
	framework.Poll(t, "the cut-off node's pod freed", func(ctx context.Context) (bool, error) { return podGone(ctx, "together-app") })
	freed := time.Now()
	lastFeed := g.Agents[0].Device.Writes().LastWrite
	fired := lastFeed.Add(watchdogFires)
	t.Logf("last Lease renewal → last feed %s, → watchdog fires %s, → pods freed %s (evacuation delay %s)",
		lastFeed.Sub(last).Round(time.Millisecond), fired.Sub(last).Round(time.Millisecond), freed.Sub(last).Round(time.Millisecond), delay)
	if !fired.Before(freed) {
		t.Errorf("the pods were freed %s before the watchdog would have fired: they could run twice", fired.Sub(freed))
	}
	if ok, err := podGone(framework.Context(t), "together-bystander"); ok || err != nil {
		t.Errorf("a live node's pod was freed (gone %v, %v)", ok, err)
	}
	g.ReadyzSays(t, 1, "feed: the API answers")
}

// The control plane unreachable for a whole group, its kubelets silent
// too, while the nodes see each other: each agent sees a majority of its
// group without the API and keeps feeding, and the controller, seeing the
// group's majority go silent at once, frees nobody's pods — the nodes run
// on, and nothing runs twice.
func TestAGroupCutOffTogetherKeepsRunningAndIsNotFenced(t *testing.T) {
	g, hbs := togetherGroup(t, "island")
	for i, node := range g.Nodes {
		podOn(t, node, fmt.Sprintf("island-app-%d", i))
	}
	for i := range g.Nodes {
		g.Proxies[i].Cut()
		hbs[i].Pause()
	}
	for i := range g.Agents {
		g.ReadyzSays(t, i, "sees a majority of its group without the API too")
	}
	cut := time.Now()
	// Well past the evacuation delay and a cap interval, every agent keeps
	// feeding and every pod stays.
	for i := range g.Agents {
		g.FeedsGrow(t, i, 3)
	}
	framework.Poll(t, "the evacuation delay and a cap interval to pass", func(ctx context.Context) (bool, error) {
		for i := range g.Nodes {
			if gone, err := podGone(ctx, fmt.Sprintf("island-app-%d", i)); gone || err != nil {
				return false, fmt.Errorf("pod island-app-%d was freed while its node ran (err %v)", i, err)
			}
		}
		return time.Since(cut) > delay+interval+time.Second, nil
	})
	for i := range g.Agents {
		g.FeedsGrow(t, i, 3)
	}
	for i := range g.Nodes {
		g.Proxies[i].Restore()
		hbs[i].Resume()
	}
	waitHeld(t, "island", metav1.ConditionFalse, fencing.ReasonNotHeld)
}

// A rotation of the group's gossip key, asked for on its Secret and
// carried out by the real controller while each agent reads the Secret as
// its kubelet mounts it, keeps the group together: no agent ever starves
// or loses a member, and afterwards the group, cut off from the API
// together, still holds its outage quorum over the new key.
func TestAGossipKeyRotationKeepsEveryNodeFed(t *testing.T) {
	g := f.StartFencedGroup(t, "rotate", framework.FencedGroupOptions{
		KeysFromController: true,
		Group: func(ng *deckhousev1.NodeGroup) {
			ng.Spec.Fencing.Watchdog = &deckhousev1.WatchdogSpec{Timeout: watchdogTimeout}
		},
		AgentArgs: []string{"--lease-stale-after=" + agentLeaseStaleAfter},
	})
	for _, node := range g.Nodes {
		hb, err := framework.StartHeartbeat(framework.Context(t), f.CP, node, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hb.Stop)
	}
	// The group together first: each agent sees all three members.
	for i := range g.Agents {
		g.ReadyzSays(t, i, "3 of 3 members")
	}
	s := f.WaitGossipKeySecret(t, "rotate")
	old := s.Data[deckhousev1.FencingGossipKeyPrimary]
	s.Annotations[deckhousev1.FencingGossipRotateAnnotation] = ""
	if _, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Update(framework.Context(t), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the rotation done, every agent fed and with its whole group throughout", func(ctx context.Context) (bool, error) {
		for _, a := range g.Agents {
			if _, body, err := a.Readyz(ctx); err == nil && (strings.Contains(body, "starve") || !strings.Contains(body, "3 of 3 members")) {
				return false, fmt.Errorf("during the rotation %s: %s", a.Node, body)
			}
		}
		cur, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(cur.Data) == 1 && !bytes.Equal(cur.Data[deckhousev1.FencingGossipKeyPrimary], old), nil
	})
	for i := range g.Agents {
		g.FeedsGrow(t, i, 3)
	}
	for _, p := range g.Proxies {
		p.Cut()
	}
	for i := range g.Agents {
		g.ReadyzSays(t, i, "sees a majority of its group without the API too")
		g.FeedsGrow(t, i, 3)
	}
	for _, p := range g.Proxies {
		p.Restore()
	}
}
