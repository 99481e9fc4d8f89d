// Package fencing is the e2e suite of the fencing controller: the real
// node-manager-controller (as its ServiceAccount, with the manifests'
// RBAC) against a local control plane, with second-scale fencing timings
// given by flags. There are no fencing agents here (their suite is
// hack/e2e/fencingagent): a test labels its Nodes fencing-enabled itself
// and plays each node's kubelet with a framework.Heartbeat, which renews
// the node's Lease with the node's own identity; pausing it is the node
// dying. A control-plane node keeps renewing throughout, as in a real
// cluster, so the controller's view of the API stays fresh unless a test
// pauses it too. bashible-apiserver runs, so the nodegroup-status
// controller writes the groups' other conditions.
package fencing

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencing"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// The suite's timings. The agents' (as the controller is told them) and
// the kubelets' intervals are half a second, so the margin must exceed
// 1.5 s; a group's watchdog timeout must exceed the agents' 1 s.
const (
	watchdogTimeout = "2s"
	margin          = 2 * time.Second
	// delay is a group's evacuation delay: watchdog timeout + margin.
	delay = 4 * time.Second
	// interval is the blast-radius cap's window; the cap is one node.
	interval = 3 * time.Second
	// viewTimeout: without any Lease renewal for this long the
	// controller's view is stale.
	viewTimeout = 2 * time.Second
)

var (
	f    = framework.New(framework.Options{})
	ctrl *stack.Controller
	// controlPlane is the heartbeat of a node outside every fenced group.
	controlPlane *framework.Heartbeat
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	// bashible-apiserver serves the groups' bundles, so the nodegroup-status
	// controller writes its conditions beside FencingHeld (the agent
	// suite's overlay: steps harmless on a simulated node).
	if _, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{TemplatesDir: f.OverlayDir()}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	if _, err := f.Kube.CoreV1().Nodes().Create(ctx, framework.NewNode("control-plane-0", ""), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the control-plane node: %w", err)
	}
	// The heartbeat outlives set-up's context, which expires.
	hbCtx, stopHeartbeat := context.WithCancel(context.Background())
	var err error
	if controlPlane, err = framework.StartHeartbeat(hbCtx, f.CP, "control-plane-0", 200*time.Millisecond); err != nil {
		stopHeartbeat()
		return nil, err
	}
	ctrl, err = f.Env.StartController(ctx, stack.ControllerOptions{ExtraArgs: []string{
		"--fencing-margin=" + margin.String(),
		"--fencing-agent-api-timeout=500ms",
		"--fencing-agent-feed-interval=500ms",
		"--fencing-lease-renew-interval=500ms",
		"--fencing-interval=" + interval.String(),
		"--fencing-max-nodes-per-interval=1",
		"--fencing-max-percent-per-interval=0",
		"--fencing-outage-percent=60",
		"--fencing-outage-min-nodes=2",
		"--fencing-api-view-timeout=" + viewTimeout.String(),
	}})
	if err != nil {
		stopHeartbeat()
		return nil, fmt.Errorf("start node-manager-controller: %w", err)
	}
	return func() { controlPlane.Stop(); stopHeartbeat() }, nil
}

// fencedGroup creates a fenced group of type typ for the test.
func fencedGroup(t *testing.T, name string, typ deckhousev1.NodeType, mode string) {
	t.Helper()
	f.TestGroup(t, framework.NewGroup(name, framework.OfType(typ), func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: mode, Watchdog: &deckhousev1.WatchdogSpec{Timeout: watchdogTimeout}}
	}))
}

// fencedNode is a node of group as its fencing agent leaves it while armed
// (labelled fencing-enabled, with its mode and type), alive: its Lease is
// renewed until the test pauses its heartbeat. annotations are added.
func fencedNode(t *testing.T, name, group string, typ deckhousev1.NodeType, mode string, annotations map[string]string) *framework.Heartbeat {
	t.Helper()
	n := framework.NewNode(name, group)
	n.Labels[deckhousev1.FencingEnabledLabel] = ""
	n.Labels[deckhousev1.FencingModeLabel] = mode
	n.Labels[deckhousev1.NodeTypeLabel] = string(typ)
	n.Annotations = annotations
	f.TestInstance(t, framework.NewInstance(name, group)) // its group is its Instance's
	f.TestNode(t, n)
	return f.TestHeartbeat(t, name)
}

// podOn binds a pod to node, as the scheduler would have. It tolerates
// every taint, so that nothing but the fencing controller removes it
// (kube-controller-manager taints nodes whose kubelet does not report).
func podOn(t *testing.T, node, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: new(bool),
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:                   []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
	var created *corev1.Pod
	// The default ServiceAccount may not exist yet right after start.
	framework.Poll(t, "create pod "+name, func(ctx context.Context) (bool, error) {
		var err error
		created, err = f.Kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return err == nil, nil
	})
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	return created
}

// podGone reports whether a pod is deleted.
func podGone(ctx context.Context, name string) (bool, error) {
	_, err := f.Kube.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// nodeGone reports whether a Node is deleted.
func nodeGone(ctx context.Context, name string) (bool, error) {
	_, err := f.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// waitHeld waits until the group's FencingHeld condition has status and
// reason, and returns it.
func waitHeld(t *testing.T, group string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var c metav1.Condition
	framework.Poll(t, fmt.Sprintf("group %s: condition %s=%s (%s)", group, fencing.ConditionFencingHeld, status, reason), func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		have := meta.FindStatusCondition(ng.Status.Conditions, fencing.ConditionFencingHeld)
		if have == nil || have.Status != status || have.Reason != reason {
			return false, nil
		}
		c = *have
		return true, nil
	})
	return c
}

// waitMetric waits until the controller exports series with value.
func waitMetric(t *testing.T, series, value string) {
	t.Helper()
	framework.Poll(t, fmt.Sprintf("metric %s %s", series, value), func(ctx context.Context) (bool, error) {
		v, ok, err := ctrl.Metric(ctx, series)
		return ok && v == value, err
	})
}
