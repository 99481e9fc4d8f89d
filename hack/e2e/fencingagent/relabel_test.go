package fencingagent

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencingagents"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// metricValue is the value of the first series of agent a's metrics that
// starts with prefix and contains every one of the parts, or -1.
func metricValue(ctx context.Context, a *stack.FencingAgent, prefix string, parts ...string) float64 {
	_, body, err := a.Metrics(ctx)
	if err != nil {
		return -1
	}
lines:
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return -1
		}
		return v
	}
	return -1
}

// heartbeat renews node's Lease, as its kubelet would, until the test ends.
func heartbeat(t *testing.T, node string) {
	t.Helper()
	hb, err := framework.StartHeartbeat(framework.Context(t), f.CP, node, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hb.Stop)
}

// daemonPodsOn lists the nodes the pods of DaemonSet name are made for
// (the DaemonSet controller pins each pod to its node by node affinity).
func daemonPodsOn(ctx context.Context, name string) (map[string]bool, error) {
	ds, err := f.Kube.AppsV1().DaemonSets(deckhousev1.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := f.Kube.CoreV1().Pods(deckhousev1.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return nil, err
	}
	on := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			on[p.Spec.NodeName] = true
		}
		a := p.Spec.Affinity
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			continue
		}
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range term.MatchFields {
				if r.Key == "metadata.name" {
					for _, v := range r.Values {
						on[v] = true
					}
				}
			}
		}
	}
	return on, nil
}

// TestANodeRelabelledIntoAFencedGroupGetsNeitherItsAgentNorAVote: a node
// of another group whose kubelet labels it node.deckhouse.io/group=<a
// fenced group> (NodeRestriction allows that) and arms itself. With the
// real node-manager-controller, kube-controller-manager's DaemonSet
// controller and three real agents of the fenced group:
//   - its kubelet identity may not write the restricted group label
//     (403 from NodeRestriction, at registration and after), which
//     node-manager-controller sets from its Instance;
//   - the fenced group's DaemonSet selects no such node, and no agent pod
//     of the group (which would mount the group's gossip keyring) is made
//     for it;
//   - even holding the group's key, an agent on it is not admitted to the
//     group's gossip nor counted in the group's quorum.
func TestANodeRelabelledIntoAFencedGroupGetsNeitherItsAgentNorAVote(t *testing.T) {
	ctx := framework.Context(t)
	const group, own, rogue, late = "fa-relabel", "fa-relabel-own", "fa-relabel-rogue", "fa-relabel-3"
	const image = "registry.example/fencing-agent:e2e"
	setPolicyImage(t, image)
	g := startGroup(t, group)
	f.TestGroup(t, framework.NewGroup(own, nil))
	ctrl, err := f.Env.StartController(ctx, stack.ControllerOptions{Identity: "fa-relabel-ctrl", ExtraArgs: []string{"--fencing-agent-image=" + image}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	// The members' kubelets, so that the fencing controller of this
	// node-manager-controller sees them alive.
	for _, node := range g.Nodes {
		heartbeat(t, node)
	}
	dsName := fencingagents.DaemonSetName(group)
	framework.Poll(t, "the group's agents' DaemonSet has a pod for each of its 3 nodes", func(ctx context.Context) (bool, error) {
		on, err := daemonPodsOn(ctx, dsName)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(on) == 3, err
	})

	// The rogue joins group own (node-manager pinned its Instance there)
	// and registers with its own kubelet identity.
	f.TestInstance(t, framework.NewInstance(rogue, own))
	cfg, err := f.CP.NodeConfig(rogue)
	if err != nil {
		t.Fatal(err)
	}
	self := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	forged := framework.NewNode(rogue, own)
	forged.Labels[deckhousev1.NodeGroupRestrictedLabel] = group
	if _, err := self.Create(ctx, forged, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the node registering itself with %s=%s: want 403 from NodeRestriction, got %v", deckhousev1.NodeGroupRestrictedLabel, group, err)
	} else {
		t.Logf("registering with the restricted label: %v", err)
	}
	if _, err := self.Create(ctx, framework.NewNode(rogue, own), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the node registering itself: %v", err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), rogue, metav1.DeleteOptions{}) })
	heartbeat(t, rogue)
	framework.Poll(t, "node-manager-controller labels the rogue with its Instance's group", func(ctx context.Context) (bool, error) {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, rogue, metav1.GetOptions{})
		return err == nil && n.Labels[deckhousev1.NodeGroupRestrictedLabel] == own, err
	})

	// Its kubelet moves it into the fenced group, as far as it may, and
	// arms itself; at its address, like the members.
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q,%q:""}}}`, deckhousev1.NodeGroupLabel, group, deckhousev1.FencingEnabledLabel)
	if _, err := self.Patch(ctx, rogue, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the node relabelling itself (NodeRestriction allows it): %v", err)
	}
	for _, value := range []string{fmt.Sprintf("%q", group), "null"} {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, deckhousev1.NodeGroupRestrictedLabel, value)
		if _, err := self.Patch(ctx, rogue, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the node setting its %s to %s: want 403 from NodeRestriction, got %v", deckhousev1.NodeGroupRestrictedLabel, value, err)
		} else {
			t.Logf("the node setting its restricted label to %s: %v", value, err)
		}
	}
	// A patch of the status alone: an update of the whole Node read a moment
	// earlier would carry its taints as they were then, and NodeRestriction
	// refuses a node's update whose taints differ from the stored ones (the
	// node template controller may have changed them since).
	status, err := json.Marshal(map[string]any{"status": corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := self.Patch(ctx, rogue, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}

	// The scheduler's rule on the DaemonSet as the controller keeps it.
	ds, err := f.Kube.AppsV1().DaemonSets(deckhousev1.Namespace).Get(ctx, dsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, rogue, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
		t.Errorf("%s's nodeSelector %v selects the relabelled node (labels %v)", dsName, ds.Spec.Template.Spec.NodeSelector, n.Labels)
	}
	// A member that registers after the rogue relabelled itself: once the
	// DaemonSet controller made its pod, it has seen the rogue as it is.
	f.TestInstance(t, framework.NewInstance(late, group))
	f.TestNode(t, framework.NewNode(late, group))
	var on map[string]bool
	framework.Poll(t, "a pod of "+dsName+" for the member that came last", func(ctx context.Context) (bool, error) {
		on, err = daemonPodsOn(ctx, dsName)
		return err == nil && on[late], err
	})
	if on[rogue] {
		t.Errorf("%s made a pod for the relabelled node %s (pods for %v): it would mount %s's gossip keyring there", dsName, rogue, on, group)
	}

	// An agent on the rogue, as if it held the group's key anyway.
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	token, pod, err := stack.FencingAgentToken(ctx, f.Kube, rogue)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Pods(deckhousev1.Namespace).Delete(context.Background(), pod, metav1.DeleteOptions{})
	})
	keys := framework.MountGossipKeys(t, f.Kube, deckhousev1.FencingGossipKeySecretPrefix+group, filepath.Join(f.CP.Dir(), "gossip-key-"+rogue))
	var peers []string
	for _, a := range g.Agents {
		peers = append(peers, a.GossipAddress())
	}
	ra, err := f.Env.StartFencingAgent(ctx, stack.FencingAgentOptions{Node: rogue, Group: group, Token: token, GossipPort: port, Peers: peers, GossipKeyDir: keys.Dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ra.Stop)

	// Each member's agent has met the rogue's: it refused it as a member,
	// or (before) admitted it.
	for _, a := range g.Agents {
		framework.Poll(t, a.Node+" met the rogue's agent", func(ctx context.Context) (bool, error) {
			return metricValue(ctx, a, "fencing_agent_gossip_rejected_total", `reason="member"`) > 0 ||
				metricValue(ctx, a, "fencing_agent_gossip_members") > 3 || metricValue(ctx, a, "fencing_agent_members_expected") > 3, nil
		})
		// Never more than the group's three; on a loaded machine a member
		// may be suspected for a moment, so fewer is waited out.
		framework.Poll(t, a.Node+"'s gossip lists and its quorum expects the 3 members", func(ctx context.Context) (bool, error) {
			listed, expected := metricValue(ctx, a, "fencing_agent_gossip_members"), metricValue(ctx, a, "fencing_agent_members_expected")
			if listed > 3 || expected > 3 {
				return false, fmt.Errorf("%s: its gossip lists %v members alive and its quorum expects %v; want 3 and 3, the members of %s, never the relabelled %s",
					a.Node, listed, expected, group, rogue)
			}
			return listed == 3 && expected == 3, nil
		})
		_, body, _ := a.Readyz(ctx)
		t.Logf("%s: %s", a.Node, body)
	}
}
