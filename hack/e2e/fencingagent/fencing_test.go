package fencingagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencingagents"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

func TestAgentsArmLabelTheirNodesAndRecordIt(t *testing.T) {
	g := startGroup(t, "fa-arm")
	for i, node := range g.Nodes {
		n, err := f.Kube.CoreV1().Nodes().Get(framework.Context(t), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Labels[deckhousev1.FencingModeLabel]; got != deckhousev1.FencingModeWatchdog {
			t.Errorf("%s: %s=%q, want %s", node, deckhousev1.FencingModeLabel, got, deckhousev1.FencingModeWatchdog)
		}
		g.ReadyzSays(t, i, "3 of 3 members of group fa-arm alive (quorum held)")
		framework.Poll(t, "a FencingArmed Event about "+node, func(context.Context) (bool, error) {
			return len(f.EventNotes(t, node, "FencingArmed")) > 0, nil
		})
	}

	// /metrics is for callers the API authenticates and authorizes; the
	// admin may read it.
	a := g.Agents[0]
	if code, _, err := a.GetAs(framework.Context(t), "/metrics", stack.Credentials{}); err != nil || code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("/metrics without credentials: %d %v, want 401 or 403", code, err)
	}
	code, body, err := a.Metrics(framework.Context(t))
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics as the admin: %d %v", code, err)
	}
	for _, want := range []string{"fencing_agent_armed 1", "fencing_agent_api_reachable 1", "fencing_agent_maintenance 0",
		"fencing_agent_members_alive 3", "fencing_agent_members_expected 3", `fencing_agent_quorum{state="held"} 1`,
		"fencing_agent_feeding 1", "fencing_agent_seconds_since_last_feed "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The control plane is unreachable for every agent (each one's proxy to
// kube-apiserver is cut) while they still see each other: each sees a
// majority of its group that has lost the API too (each publishes its API
// state in the gossip), so it knows it is not the one cut off, and keeps
// feeding. An agent of Deckhouse's first generation stops here, and every
// node of the cluster resets.
func TestControlPlaneUnreachableForAllWhileTheySeeEachOtherEveryoneKeepsFeeding(t *testing.T) {
	g := startGroup(t, "fa-cp-down")
	for _, p := range g.Proxies {
		p.Cut()
	}
	for i := range g.Agents {
		g.ReadyzSays(t, i, "the API does not answer, and this node sees a majority of its group without the API too")
	}
	// Ten turns of each agent's loop with the API gone.
	for i := range g.Agents {
		g.FeedsGrow(t, i, 10)
	}
	for i := range g.Agents {
		g.ReadyzSays(t, i, "sees a majority of its group without the API too")
	}
	for _, p := range g.Proxies {
		p.Restore()
	}
	for i := range g.Agents {
		g.ReadyzSays(t, i, "feed: the API answers")
	}
}

// One agent is cut off from both the API and its peers: its proxy to
// kube-apiserver is cut, and its two peers are frozen with SIGSTOP. The
// freeze is an honest partition from the cut-off agent's side: a stopped
// process answers no gossip probe, over UDP or TCP, exactly as a peer
// behind a broken link does, and the agent under test runs unchanged — it
// has only its own view, which is what it decides on. (A relay per agent
// would cut the links rather than the peers, but memberlist advertises
// and probes each member at its own address, so relays would have to
// rewrite addresses; freezing needs no such machinery.) The frozen peers'
// own decisions are not judged here: the previous test covers a majority.
// It stops feeding and stays armed, so the watchdog would reset the node;
// once the API and the peers are back it feeds again.
func TestAnAgentCutOffFromTheAPIAndItsPeersStopsFeeding(t *testing.T) {
	g := startGroup(t, "fa-cut-off")
	a := g.Agents[0]
	for _, peer := range g.Agents[1:] {
		if err := peer.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	g.Proxies[0].Cut()
	g.ReadyzSays(t, 0, "this node sees less than a majority of its group: cut off")
	// Stopped feeding: the device stays silent for ten loop turns while
	// the loop keeps turning (/readyz answers with the same state).
	waitUnfed(t, a, "")
	g.ReadyzSays(t, 0, "starve: the API does not answer")
	if w := a.Device.Writes(); w.Last == 'V' {
		t.Fatal("the cut-off agent disarmed its watchdog; it must stay armed so the watchdog resets the node")
	}

	for _, peer := range g.Agents[1:] {
		if err := peer.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	g.Proxies[0].Restore()
	g.FeedsGrow(t, 0, 3)
	g.ReadyzSays(t, 0, "3 of 3 members")
}

// One agent loses the API while its peers, which it still sees, reach it:
// that agent is the one cut off (its Lease alone goes stale, and the
// fencing controller will free its pods), so seeing a majority does not
// keep it feeding. Its peers keep feeding; when its API is back, so does it.
func TestAnAgentThatAloneLostTheAPIStopsFeedingThoughItSeesItsPeers(t *testing.T) {
	g := startGroup(t, "fa-alone")
	a := g.Agents[0]
	g.Proxies[0].Cut()
	g.ReadyzSays(t, 0, "starve: the API does not answer while the members this node sees still reach it")
	cutOff := a.Device.Writes()
	framework.Poll(t, "the watchdog of "+a.Node+" unfed for 3 s", func(ctx context.Context) (bool, error) {
		w := a.Device.Writes()
		if w.Feeds != cutOff.Feeds || w.MagicCloses != cutOff.MagicCloses {
			return false, fmt.Errorf("the agent cut off alone wrote to its watchdog: %+v, then %+v", cutOff, w)
		}
		return time.Since(w.LastWrite) > 10*300*time.Millisecond, nil
	})
	g.ReadyzSays(t, 0, "3 of 3 members")
	g.FeedsGrow(t, 1, 3)
	g.FeedsGrow(t, 2, 3)
	g.Proxies[0].Restore()
	g.FeedsGrow(t, 0, 3)
	g.ReadyzSays(t, 0, "feed: the API answers")
}

// A node whose kubelet stops renewing its Lease (framework.Heartbeat plays
// the kubelet) is fenced by the controller though its agent reaches the
// API, and its containers may still run: the agent stops feeding once the
// Lease is older than --lease-stale-after (2 s here), so the watchdog
// resets the node first; when the kubelet renews again, it feeds again.
func TestAnAgentWhoseKubeletStopsRenewingStopsFeeding(t *testing.T) {
	g := startGroup(t, "fa-kubelet")
	a := g.Agents[0]
	hb, err := framework.StartHeartbeat(framework.Context(t), f.CP, a.Node, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hb.Stop)
	g.FeedsGrow(t, 0, 3)
	hb.Pause()
	g.ReadyzSays(t, 0, "starve: the API answers, but the node's Lease was last renewed")
	stale := a.Device.Writes()
	framework.Poll(t, "the watchdog of "+a.Node+" unfed for 3 s", func(ctx context.Context) (bool, error) {
		w := a.Device.Writes()
		if w.Feeds != stale.Feeds || w.MagicCloses != stale.MagicCloses {
			return false, fmt.Errorf("the agent of a node whose Lease is stale wrote to its watchdog: %+v, then %+v", stale, w)
		}
		return time.Since(w.LastWrite) > 10*300*time.Millisecond, nil
	})
	hb.Resume()
	g.FeedsGrow(t, 0, 3)
	g.ReadyzSays(t, 0, "feed: the API answers")
}

// Each maintenance annotation disarms the agent — label removed, then the
// magic close on the device — and it stays disarmed; once the annotation
// is gone it arms again.
func TestMaintenanceAnnotationsDisarmAndTheAgentRearmsAfterwards(t *testing.T) {
	g := startGroup(t, "fa-maint")
	a := g.Agents[0]
	for _, annotation := range []string{deckhousev1.ApprovedAnnotation, deckhousev1.DisruptionApprovedAnnotation, deckhousev1.FencingDisableAnnotation} {
		closes := a.Device.Writes().MagicCloses
		annotate(t, g.Nodes[0], annotation, new(""))
		framework.Poll(t, a.Node+" disarmed for "+annotation, func(ctx context.Context) (bool, error) {
			w := a.Device.Writes()
			return w.MagicCloses == closes+1 && w.Last == 'V' && !f.Labelled(ctx, g, 0), nil
		})
		g.ReadyzSays(t, 0, "disarmed: maintenance ("+annotation+")")
		if w := a.Device.Writes(); w.Last != 'V' {
			t.Fatalf("%s: the agent wrote to its watchdog after the magic close (last %q)", annotation, w.Last)
		}
		annotate(t, g.Nodes[0], annotation, nil)
		f.WaitArmed(t, g, 0)
		g.FeedsGrow(t, 0, 2)
	}
	framework.Poll(t, "FencingDisarmed Events about "+a.Node, func(context.Context) (bool, error) {
		return len(f.EventNotes(t, a.Node, "FencingDisarmed")) > 0, nil
	})
}

// SIGTERM, as the kubelet sends when the pod goes: the label goes, then
// the magic close.
func TestSIGTERMRemovesTheLabelAndDisarms(t *testing.T) {
	g := startGroup(t, "fa-sigterm")
	a := g.Agents[0]
	a.Process.Stop() // SIGTERM; waits for the exit
	framework.Poll(t, "the magic close on "+a.Node, func(context.Context) (bool, error) {
		return a.Device.Writes().Last == 'V', nil
	})
	if f.Labelled(framework.Context(t), g, 0) {
		t.Fatalf("%s still carries %s after its agent stopped", a.Node, deckhousev1.FencingEnabledLabel)
	}
}

// In Notify mode the agents detect and label alike, say so in the mode
// label, and never touch the device: nothing would reset the node.
func TestNotifyModeLabelsAndNeverOpensTheDevice(t *testing.T) {
	g := startGroupIn(t, "fa-notify", deckhousev1.FencingModeNotify)
	for i, node := range g.Nodes {
		n, err := f.Kube.CoreV1().Nodes().Get(framework.Context(t), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Labels[deckhousev1.FencingModeLabel]; got != deckhousev1.FencingModeNotify {
			t.Errorf("%s: %s=%q, want Notify", node, deckhousev1.FencingModeLabel, got)
		}
		g.ReadyzSays(t, i, "armed (mode Notify), feed: the API answers")
	}
	// Cut off, a Notify agent only reports it.
	g.Proxies[0].Cut()
	for _, peer := range g.Agents[1:] {
		if err := peer.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	g.ReadyzSays(t, 0, "starve: the API does not answer")
	for _, peer := range g.Agents[1:] {
		if err := peer.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	g.Agents[0].Process.Stop()
	for _, a := range g.Agents {
		if w := a.Device.Writes(); w.Feeds != 0 || w.MagicCloses != 0 {
			t.Errorf("the Notify agent on %s wrote to its device: %+v", a.Node, w)
		}
	}
}

// annotate sets (value non-nil) or removes an annotation of node as the
// cluster administrator.
func annotate(t *testing.T, node, key string, value *string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Kube.CoreV1().Nodes().Patch(framework.Context(t), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitUnfed waits until a cut-off agent has left its watchdog unfed for
// ten loop turns (3 s) while its loop keeps turning, failing on any write
// to the device meanwhile; how says under what (for the message).
func waitUnfed(t *testing.T, a *stack.FencingAgent, how string) {
	t.Helper()
	cutOff := a.Device.Writes()
	framework.Poll(t, "the watchdog of "+a.Node+" unfed for 3 s", func(ctx context.Context) (bool, error) {
		w := a.Device.Writes()
		if w.Feeds != cutOff.Feeds || w.MagicCloses != cutOff.MagicCloses {
			return false, fmt.Errorf("the cut-off agent wrote to its watchdog%s: %+v, then %+v", how, cutOff, w)
		}
		return time.Since(w.LastWrite) > 10*300*time.Millisecond, nil
	})
}

// The agent checks the API along the kubelet's path, the node's local API
// proxy, which node-manager-controller's DaemonSet passes as --api-server,
// not the Service VIP of its in-cluster configuration (here each agent's
// kubeconfig names a proxy of its own, the Service path, and its node's
// local proxy is passed as --api-server, as the DaemonSet's
// 127.0.0.1:6445 is on a node). With the Service path broken on every
// node (kube-proxy or the CNI down), every agent keeps feeding: the API
// answers the kubelet. With its node's local proxy cut, an agent stops
// feeding though its Service path works: its kubelet has lost the API too,
// its Lease goes stale and its pods will be freed.
func TestAgentsCheckTheAPIThroughTheNodesLocalProxyNotTheServicePath(t *testing.T) {
	ds := fencingagents.DaemonSet(framework.NewGroup("fa-path", func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog}
	}), deckhousev1.Namespace, deckhousev1.FencingAgentName)
	apiServer := ""
	for _, arg := range ds.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(arg, "--api-server="); ok {
			apiServer = v
		}
	}
	if apiServer != deckhousev1.NodeAPIProxyURL || !ds.Spec.Template.Spec.HostNetwork {
		t.Fatalf("node-manager-controller's DaemonSet has its agents reach the API at %q (host network %t), want the node's local API proxy %s on the host network: "+
			"the in-cluster configuration is the Service VIP, which a node's broken kube-proxy or CNI cuts while its kubelet still reaches the API",
			apiServer, ds.Spec.Template.Spec.HostNetwork, deckhousev1.NodeAPIProxyURL)
	}

	g := f.StartFencedGroup(t, "fa-path", framework.FencedGroupOptions{ServicePath: true})
	for _, p := range g.ServicePaths {
		p.Cut()
	}
	for i := range g.Agents {
		g.FeedsGrow(t, i, 5)
		g.ReadyzSays(t, i, "feed: the API answers")
	}
	g.Proxies[0].Cut()
	g.ReadyzSays(t, 0, "starve: the API does not answer while the members this node sees still reach it")
	waitUnfed(t, g.Agents[0], "")
	g.FeedsGrow(t, 1, 3)
	g.Proxies[0].Restore()
	g.FeedsGrow(t, 0, 3)
}

// An RBAC drift takes the agents' read of their node's Lease away (the
// RoleBinding in kube-node-lease is deleted) while the API still answers
// their Node GET. The fencing controller still reads the Leases and would
// free the pods of a node whose kubelet died, so a Lease the agent cannot
// read must not count as fresh: once it has been unread for
// --lease-stale-after (2 s here) every agent stops feeding; when the read
// is allowed again, they feed again.
func TestAgentsThatCannotReadTheirLeaseStopFeeding(t *testing.T) {
	g := startGroup(t, "fa-lease-rbac")
	ctx := framework.Context(t)
	const binding = "d8:node-manager:fencing-agent"
	bindings := f.Kube.RbacV1().RoleBindings(corev1.NamespaceNodeLease)
	rb, err := bindings.Get(ctx, binding, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restore := func() {
		again := rb.DeepCopy()
		again.ResourceVersion, again.UID = "", ""
		if _, err := bindings.Create(context.Background(), again, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("restoring RoleBinding %s/%s: %v", corev1.NamespaceNodeLease, binding, err)
		}
	}
	t.Cleanup(restore)
	if err := bindings.Delete(ctx, binding, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range g.Agents {
		g.ReadyzSays(t, i, "starve: the API answers, but the node's Lease has not been read for")
	}
	waitUnfed(t, g.Agents[0], " with its Lease unreadable")
	if w := g.Agents[0].Device.Writes(); w.Last == 'V' {
		t.Fatal("the agent disarmed its watchdog; it must stay armed so the watchdog resets the node")
	}
	restore()
	for i := range g.Agents {
		g.FeedsGrow(t, i, 3)
		g.ReadyzSays(t, i, "feed: the API answers")
	}
}
