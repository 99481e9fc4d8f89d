package fencingagents

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

func fenced(name, mode string) *deckhousev1.NodeGroup {
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	if mode != "" {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: mode}
	}
	return ng
}

func TestAWatchdogGroupsAgentsGetTheDeviceAndRunOnlyOnItsNodes(t *testing.T) {
	ds := DaemonSet(fenced("workers", deckhousev1.FencingModeWatchdog), deckhousev1.Namespace, "registry/fencing-agent:v1")
	if ds.Name != "fencing-agent-workers" || ds.Namespace != deckhousev1.Namespace {
		t.Fatalf("DaemonSet %s/%s", ds.Namespace, ds.Name)
	}
	pod := ds.Spec.Template.Spec
	// The scheduler's rule: the pod goes to the nodes whose labels match
	// its nodeSelector. A member (its restricted group label set from its
	// Instance) matches; a node of another group that labelled itself
	// into workers does not, nor does one without the restricted label.
	sel := labels.SelectorFromSet(pod.NodeSelector)
	for _, tc := range []struct {
		what   string
		labels map[string]string
		match  bool
	}{
		{"a node of workers", map[string]string{deckhousev1.NodeGroupLabel: "workers", deckhousev1.NodeGroupRestrictedLabel: "workers"}, true},
		{"a node of workers that relabelled itself out", map[string]string{deckhousev1.NodeGroupLabel: "others", deckhousev1.NodeGroupRestrictedLabel: "workers"}, true},
		{"a node of others that relabelled itself into workers", map[string]string{deckhousev1.NodeGroupLabel: "workers", deckhousev1.NodeGroupRestrictedLabel: "others"}, false},
		{"a node without an Instance labelled workers", map[string]string{deckhousev1.NodeGroupLabel: "workers"}, false},
	} {
		if sel.Matches(labels.Set(tc.labels)) != tc.match {
			t.Errorf("node selector %v: %s (labels %v) matches=%v, want %v", pod.NodeSelector, tc.what, tc.labels, !tc.match, tc.match)
		}
	}
	if pod.ServiceAccountName != deckhousev1.FencingAgentName || !pod.HostNetwork {
		t.Errorf("service account %q, host network %v", pod.ServiceAccountName, pod.HostNetwork)
	}
	if len(pod.Volumes) != 2 || pod.Volumes[1].HostPath == nil || pod.Volumes[1].HostPath.Path != WatchdogDevice ||
		*pod.Volumes[1].HostPath.Type != "CharDevice" {
		t.Errorf("volumes %+v, want the gossip keyring and the host's watchdog as a CharDevice", pod.Volumes)
	}
	checkKeyVolume(t, pod, "workers")
	c := pod.Containers[0]
	if c.Image != "registry/fencing-agent:v1" || !*c.SecurityContext.Privileged {
		t.Errorf("image %q, privileged %v", c.Image, *c.SecurityContext.Privileged)
	}
	// The user the node step gives the device to, not root, no capabilities.
	if sc := pod.SecurityContext; sc.RunAsUser == nil || *sc.RunAsUser != deckhousev1.FencingAgentUID ||
		sc.RunAsGroup == nil || *sc.RunAsGroup != deckhousev1.FencingAgentUID || !*sc.RunAsNonRoot ||
		!slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.SecurityContext.Capabilities.Add) > 0 {
		t.Errorf("the agent runs as %v:%v (non-root %v), capabilities %+v; want %d:%d, non-root, all dropped",
			ptrValue(sc.RunAsUser), ptrValue(sc.RunAsGroup), *sc.RunAsNonRoot, *c.SecurityContext.Capabilities, deckhousev1.FencingAgentUID, deckhousev1.FencingAgentUID)
	}
	for _, arg := range []string{"--mode=Watchdog", "--feed-interval=5s", "--api-timeout=3s", "--watchdog-device=/dev/watchdog"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	if !env["NODE_NAME"] || !env["NODE_GROUP"] || !env["POD_IP"] || !env["HOST_IP"] || !slices.Contains(c.Args, "--gossip-bind-address=$(HOST_IP)") {
		t.Errorf("env %+v", c.Env)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the selector %v does not select the pod template's labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
		}
	}
}

func TestANotifyGroupsAgentsHaveNoDeviceAndNoPrivilege(t *testing.T) {
	ds := DaemonSet(fenced("workers", deckhousev1.FencingModeNotify), deckhousev1.Namespace, deckhousev1.FencingAgentName)
	pod := ds.Spec.Template.Spec
	if len(pod.Volumes) != 1 || len(pod.Containers[0].VolumeMounts) != 1 {
		t.Errorf("a Notify agent mounts %+v; it never opens the device, and mounts only its gossip keyring", pod.Volumes)
	}
	checkKeyVolume(t, pod, "workers")
	if *pod.Containers[0].SecurityContext.Privileged {
		t.Error("a Notify agent is privileged")
	}
	if !slices.Contains(pod.Containers[0].Args, "--mode=Notify") {
		t.Errorf("args %v", pod.Containers[0].Args)
	}
}

// checkKeyVolume checks that the pod mounts its group's gossip keyring
// Secret, read-only, readable by the agent's group alone, and tells the
// agent where.
func checkKeyVolume(t *testing.T, pod corev1.PodSpec, group string) {
	t.Helper()
	v := pod.Volumes[0]
	if v.Secret == nil || v.Secret.SecretName != deckhousev1.FencingGossipKeySecretPrefix+group || *v.Secret.DefaultMode != 0o440 {
		t.Errorf("volume %+v, want Secret %s%s of mode 0440", v, deckhousev1.FencingGossipKeySecretPrefix, group)
	}
	if pod.SecurityContext.FSGroup == nil || *pod.SecurityContext.FSGroup != *pod.SecurityContext.RunAsUser {
		t.Errorf("fsGroup %v: the keyring must be readable by the agent's group", pod.SecurityContext.FSGroup)
	}
	m := pod.Containers[0].VolumeMounts[0]
	if m.Name != v.Name || m.MountPath != GossipKeyDir || !m.ReadOnly || !slices.Contains(pod.Containers[0].Args, "--gossip-key-dir="+GossipKeyDir) {
		t.Errorf("mount %+v, args %v", m, pod.Containers[0].Args)
	}
}

func TestAGroupWithoutFencingHasNoAgents(t *testing.T) {
	if ds := DaemonSet(fenced("workers", ""), deckhousev1.Namespace, deckhousev1.FencingAgentName); ds != nil {
		t.Fatalf("DaemonSet %s for a group without spec.fencing", ds.Name)
	}
}

// controllerWith runs the controller's informers over fake clients.
func controllerWith(t *testing.T, groups ...*deckhousev1.NodeGroup) (*Controller, *kubefake.Clientset, *nmfake.Clientset) {
	t.Helper()
	var objs []runtime.Object
	for _, g := range groups {
		objs = append(objs, g)
	}
	return controllerWithObjects(t, nil, objs)
}

// controllerWithObjects is controllerWith over the given objects: kube's
// (Nodes, DaemonSets) and node-manager's (NodeGroups, Instances).
func controllerWithObjects(t *testing.T, kubeObjs, nmObjs []runtime.Object) (*Controller, *kubefake.Clientset, *nmfake.Clientset) {
	t.Helper()
	kube := kubefake.NewClientset(kubeObjs...)
	nm := nmfake.NewSimpleClientset()
	for _, g := range nmObjs {
		if err := nm.Tracker().Add(g); err != nil {
			t.Fatal(err)
		}
	}
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clocktesting.NewFakeClock(time.Now()), prometheus.NewRegistry())
	c := New(d, NewOptions())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.Informers.Namespace.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	d.Informers.Cluster.Start(ctx.Done())
	if !manager.HasSynced(ctx, "test", c.synced...) {
		t.Fatal("informers did not sync")
	}
	return c, kube, nm
}

func (c *Controller) get(t *testing.T, kube *kubefake.Clientset, group string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := kube.AppsV1().DaemonSets(deckhousev1.Namespace).Get(context.Background(), DaemonSetName(group), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestTheDaemonSetFollowsTheGroupsFencing(t *testing.T) {
	c, kube, nm := controllerWith(t, fenced("workers", deckhousev1.FencingModeWatchdog))
	ctx := context.Background()
	if err := c.sync(ctx, "workers"); err != nil {
		t.Fatal(err)
	}
	if ds := c.get(t, kube, "workers"); ds == nil || !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--mode=Watchdog") {
		t.Fatalf("DaemonSet after the first sync: %+v", ds)
	}

	ng, _ := nm.DeckhouseV1().NodeGroups().Get(ctx, "workers", metav1.GetOptions{})
	ng.Spec.Fencing.Mode = deckhousev1.FencingModeNotify
	if _, err := nm.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, func() bool {
		g, _ := c.groups.Get("workers")
		return g.Spec.Fencing.Mode == deckhousev1.FencingModeNotify
	})
	waitCached(t, func() bool {
		_, err := c.daemonSets.DaemonSets(deckhousev1.Namespace).Get(DaemonSetName("workers"))
		return err == nil
	})
	if err := c.sync(ctx, "workers"); err != nil {
		t.Fatal(err)
	}
	if ds := c.get(t, kube, "workers"); ds == nil || !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--mode=Notify") {
		t.Fatalf("DaemonSet after the group switched to Notify: %+v", ds.Spec.Template.Spec.Containers[0].Args)
	}

	ng, _ = nm.DeckhouseV1().NodeGroups().Get(ctx, "workers", metav1.GetOptions{})
	ng.Spec.Fencing = nil
	if _, err := nm.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, func() bool { g, _ := c.groups.Get("workers"); return g.Spec.Fencing == nil })
	if err := c.sync(ctx, "workers"); err != nil {
		t.Fatal(err)
	}
	if ds := c.get(t, kube, "workers"); ds != nil {
		t.Fatal("the DaemonSet stays after the group dropped fencing")
	}
	if _, err := kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, KeySecretName("workers"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the gossip keyring Secret stays after the group dropped fencing: %v", err)
	}
}

func TestADaemonSetNotOursIsLeftAlone(t *testing.T) {
	c, kube, _ := controllerWith(t, fenced("workers", ""))
	mine := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName("workers"), Namespace: deckhousev1.Namespace}}
	if _, err := kube.AppsV1().DaemonSets(deckhousev1.Namespace).Create(context.Background(), mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, func() bool {
		_, err := c.daemonSets.DaemonSets(deckhousev1.Namespace).Get(mine.Name)
		return err == nil
	})
	if err := c.sync(context.Background(), "workers"); err != nil {
		t.Fatal(err)
	}
	if c.get(t, kube, "workers") == nil {
		t.Fatal("deleted a DaemonSet node-manager did not make")
	}
}

func waitCached(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the informer cache did not catch up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ptrValue(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestAnOldDaemonSetMovesToTheRestrictedLabelOnlyOnceEveryMemberCarriesIt:
// a DaemonSet made before the restricted group label (selecting by the
// node's own group label) is left as it is while a member of the group
// (by its Instance) lacks the label, so that no agent is taken off its
// node meanwhile; once every member carries it, the DaemonSet selects by
// it. A node that labelled itself into the group holds nothing up.
func TestAnOldDaemonSetMovesToTheRestrictedLabelOnlyOnceEveryMemberCarriesIt(t *testing.T) {
	ng := fenced("workers", deckhousev1.FencingModeWatchdog)
	old := DaemonSet(ng, deckhousev1.Namespace, deckhousev1.FencingAgentName)
	old.Spec.Template.Spec.NodeSelector = map[string]string{deckhousev1.NodeGroupLabel: "workers"}
	member := func(name string, restricted bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: "workers"}}}
		if restricted {
			n.Labels[deckhousev1.NodeGroupRestrictedLabel] = "workers"
		}
		return n
	}
	inst := func(name, group string) *deckhousev1alpha1.Instance {
		return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: group}}}
	}
	c, kube, _ := controllerWithObjects(t,
		[]runtime.Object{old, member("w0", true), member("w1", false), member("rogue", false)},
		[]runtime.Object{ng, inst("w0", "workers"), inst("w1", "workers"), inst("rogue", "others")})
	ctx := context.Background()
	if err := c.sync(ctx, "workers"); err != nil {
		t.Fatal(err)
	}
	if ds := c.get(t, kube, "workers"); !equality.Semantic.DeepEqual(ds.Spec.Template.Spec.NodeSelector, old.Spec.Template.Spec.NodeSelector) {
		t.Fatalf("the DaemonSet moved to %v while member w1 lacks the restricted label: its agent would be taken off it", ds.Spec.Template.Spec.NodeSelector)
	}
	if _, err := kube.CoreV1().Nodes().Update(ctx, member("w1", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, func() bool {
		n, err := c.nodes.Get("w1")
		return err == nil && n.Labels[deckhousev1.NodeGroupRestrictedLabel] == "workers"
	})
	if err := c.sync(ctx, "workers"); err != nil {
		t.Fatal(err)
	}
	if ds := c.get(t, kube, "workers"); !equality.Semantic.DeepEqual(ds.Spec.Template.Spec.NodeSelector, NodeSelector("workers")) {
		t.Fatalf("every member carries the restricted label, the DaemonSet still selects %v", ds.Spec.Template.Spec.NodeSelector)
	}
}
