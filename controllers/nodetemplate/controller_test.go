package nodetemplate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// countPatches counts the Node patches the controller sends.
func countPatches(kube *kubefake.Clientset) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

// newNodeManagerClientset is the fake without field management: the
// field-managed NewClientset finds no structured-merge schema for the
// generated NodeGroup type and refuses updates.
func newNodeManagerClientset(objs ...runtime.Object) *nmfake.Clientset {
	return nmfake.NewSimpleClientset(objs...)
}

// instance is the Instance that pins node name to group.
func instance(name, group string) *deckhousev1alpha1.Instance {
	return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: group}}}
}

func TestControllerAgainstFakeClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	managed := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "managed", Labels: map[string]string{deckhousev1.NodeGroupLabel: "worker", "foreign": "x"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			taint(cloudUninit, "true", corev1.TaintEffectNoSchedule),
			taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule),
		}},
	}
	unmanaged := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unmanaged", Labels: map[string]string{"foreign": "x"}}}
	orphan := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan", Labels: map[string]string{deckhousev1.NodeGroupLabel: "ghost"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule)}},
	}
	worker := group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
		Labels: map[string]string{"tier": "db"},
		Taints: []deckhousev1.Taint{ngTaint("dedicated", "db", "NoSchedule"), ngTaint(deckhousev1.UninitializedTaint, "", "NoSchedule")},
	})
	// rogue relabelled itself into group master; unadmitted has no Instance.
	rogue := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rogue", Labels: map[string]string{deckhousev1.NodeGroupLabel: "master"}}}
	unadmitted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unadmitted", Labels: map[string]string{deckhousev1.NodeGroupLabel: "worker"}}}
	master := group("master", deckhousev1.NodeTypeCloudPermanent, &deckhousev1.NodeTemplate{
		Labels: map[string]string{deckhousev1.ControlPlaneRoleLabel: ""},
	})
	kube := kubefake.NewClientset(managed, unmanaged, orphan, rogue, unadmitted)
	nm := newNodeManagerClientset(worker, master, instance("managed", "worker"), instance("orphan", "ghost"),
		instance("unmanaged", "worker"), instance("rogue", "worker"))
	reg := prometheus.NewRegistry()
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clock.RealClock{}, reg)
	recorder := events.NewFakeRecorder(10)
	d.Recorder = recorder
	c := New(d)
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	go c.Run(ctx, 1)

	poll := func(what string, cond func() (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond() }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	getNode := func(name string) *corev1.Node {
		t.Helper()
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	poll("the template on node managed", func() (bool, error) {
		n := getNode("managed")
		return n.Labels["tier"] == "db" && n.Labels[deckhousev1.NodeTypeLabel] == "Static", nil
	})
	n := getNode("managed")
	if n.Labels["foreign"] != "x" || n.Annotations[deckhousev1.ScaleDownDisabledAnnotation] != "true" || n.Labels[deckhousev1.NodeRoleLabelPrefix+"worker"] != "" {
		t.Errorf("managed node metadata: labels %v annotations %v", n.Labels, n.Annotations)
	}
	if want := []corev1.Taint{taint(cloudUninit, "true", corev1.TaintEffectNoSchedule), taint("dedicated", "db", corev1.TaintEffectNoSchedule)}; !equalTaints(n.Spec.Taints, want) {
		t.Errorf("managed node taints = %v, want %v", n.Spec.Taints, want)
	}

	select {
	case e := <-recorder.Events:
		if !strings.Contains(e, ReasonSkippedKeys) || !strings.Contains(e, "taint "+deckhousev1.UninitializedTaint+":NoSchedule") {
			t.Errorf("event = %q, want a %s warning naming the uninitialized taint", e, ReasonSkippedKeys)
		}
	case <-time.After(30 * time.Second):
		t.Error("no warning about the template's reserved taint")
	}

	// A node's group is its Instance's: rogue gets worker's template, not
	// the control-plane label of the group its own label names.
	poll("worker's template on node rogue", func() (bool, error) {
		return getNode("rogue").Labels["tier"] == "db", nil
	})
	if r := getNode("rogue"); r.Labels[deckhousev1.NodeTypeLabel] != "Static" {
		t.Errorf("rogue should be typed by its Instance's group (Static): %v", r.Labels)
	} else if _, ok := r.Labels[deckhousev1.ControlPlaneRoleLabel]; ok {
		t.Errorf("rogue got the template of the group its own label names: %v", r.Labels)
	}

	poll("the unmanaged gauge of node unmanaged", func() (bool, error) {
		return testutil.CollectAndCount(c.unmanaged) == 1 && testutil.ToFloat64(c.unmanaged.WithLabelValues("unmanaged")) == 1, nil
	})

	// Idempotence: meeting the converged node again writes nothing. The
	// fake issues no resource versions, so the cache cannot tell its
	// written copy is newer than the informer's: wait for the informer.
	poll("the informer's copy of node managed", func() (bool, error) {
		n, err := d.Nodes.Get("managed")
		return err == nil && n.Labels["tier"] == "db", err
	})
	for name, group := range map[string]string{"managed": "worker", "unmanaged": "worker", "orphan": "ghost"} {
		poll("the informer's copy of node "+name+" with its restricted group label", func() (bool, error) {
			n, err := d.Nodes.Get(name)
			return err == nil && n.Labels[deckhousev1.NodeGroupRestrictedLabel] == group, err
		})
	}
	patches := countPatches(kube)
	for _, name := range []string{"managed", "unmanaged", "orphan", "unadmitted"} {
		if err := c.sync(ctx, name); err != nil {
			t.Fatalf("sync %s: %v", name, err)
		}
	}
	if got := countPatches(kube); got != patches {
		t.Errorf("a second reconcile patched nodes: %d patches, want %d", got, patches)
	}
	if o := getNode("orphan"); len(o.Spec.Taints) != 1 || len(o.Annotations) != 0 || len(o.Labels) != 2 {
		t.Errorf("a node of an unknown group was changed: %+v", o)
	}
	if u := getNode("unadmitted"); len(u.Labels) != 1 || len(u.Annotations) != 0 {
		t.Errorf("a node without an Instance was changed: %+v", u.ObjectMeta)
	}
	// Admitted (its Instance created), it gets its group's template.
	if _, err := nm.DeckhouseV1alpha1().Instances().Create(ctx, instance("unadmitted", "worker"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the template on the admitted node", func() (bool, error) {
		return getNode("unadmitted").Labels["tier"] == "db", nil
	})

	// A NodeGroup change reaches its nodes: a label is removed, a taint changed.
	worker, err := nm.DeckhouseV1().NodeGroups().Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Taints: []deckhousev1.Taint{ngTaint("dedicated", "web", "NoSchedule")}}
	worker.Generation++
	if _, err := nm.DeckhouseV1().NodeGroups().Update(ctx, worker, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the changed template on node managed", func() (bool, error) {
		n := getNode("managed")
		_, hasTier := n.Labels["tier"]
		return !hasTier && equalTaints(n.Spec.Taints, []corev1.Taint{
			taint(cloudUninit, "true", corev1.TaintEffectNoSchedule), taint("dedicated", "web", corev1.TaintEffectNoSchedule),
		}), nil
	})
	if n := getNode("managed"); n.Labels["foreign"] != "x" {
		t.Errorf("the foreign label is gone: %v", n.Labels)
	}

	// The unmanaged node joins a group: its series goes; a deleted
	// unmanaged node's series goes too.
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stray"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("two unmanaged series", func() (bool, error) { return testutil.CollectAndCount(c.unmanaged) == 2, nil })
	u := getNode("unmanaged")
	u.Labels[deckhousev1.NodeGroupLabel] = "worker"
	if _, err := kube.CoreV1().Nodes().Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Nodes().Delete(ctx, "stray", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("no unmanaged series", func() (bool, error) { return testutil.CollectAndCount(c.unmanaged) == 0, nil })
	poll("the template on the node that joined", func() (bool, error) {
		return getNode("unmanaged").Labels[deckhousev1.NodeTypeLabel] == "Static", nil
	})
}

// A conflict (someone changed the node since the cache saw it) is an
// error, so the loop retries from fresh state rather than overwriting.
func TestSyncReturnsConflicts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{deckhousev1.NodeGroupLabel: "worker"}}}
	kube := kubefake.NewClientset(node)
	kube.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "n1", errors.New("changed meanwhile"))
	})
	nm := newNodeManagerClientset(group("worker", deckhousev1.NodeTypeStatic, nil), instance("n1", "worker"))
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clock.RealClock{}, prometheus.NewRegistry())
	c := New(d)
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	if !manager.HasSynced(ctx, "test", c.synced...) {
		t.Fatal("caches did not sync")
	}
	if err := c.sync(ctx, "n1"); err == nil {
		t.Fatal("sync swallowed a conflict")
	}
}

// TestTheRestrictedGroupLabelFollowsTheInstance: every Node's
// node-restriction.kubernetes.io/deckhouse-node-group label (which its
// kubelet cannot write, and the fencing agents' DaemonSets select on) is
// its Instance's group: set on a node that relabelled itself into another
// group, corrected where it says another group, removed from a node with
// no Instance, and never taken from a NodeGroup's template.
func TestTheRestrictedGroupLabelFollowsTheInstance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	labelled := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	// rogue relabelled itself into master; forged carries master's
	// restricted label (written by someone else); loose has one but no
	// Instance; bare has no label of its own; fresh is a new node.
	kube := kubefake.NewClientset(
		labelled("rogue", map[string]string{deckhousev1.NodeGroupLabel: "master"}),
		labelled("forged", map[string]string{deckhousev1.NodeGroupLabel: "worker", deckhousev1.NodeGroupRestrictedLabel: "master"}),
		labelled("loose", map[string]string{deckhousev1.NodeGroupLabel: "master", deckhousev1.NodeGroupRestrictedLabel: "master"}),
		labelled("bare", nil),
		labelled("fresh", map[string]string{deckhousev1.NodeGroupLabel: "worker"}),
	)
	// worker's template tries to set the label itself.
	worker := group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
		Labels: map[string]string{deckhousev1.NodeGroupRestrictedLabel: "master", "tier": "db"},
	})
	nm := newNodeManagerClientset(worker, group("master", deckhousev1.NodeTypeStatic, nil),
		instance("rogue", "worker"), instance("forged", "worker"), instance("bare", "worker"), instance("fresh", "worker"))
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clock.RealClock{}, prometheus.NewRegistry())
	d.Recorder = events.NewFakeRecorder(10)
	c := New(d)
	d.Informers.Cluster.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	go c.Run(ctx, 1)

	want := map[string]string{"rogue": "worker", "forged": "worker", "loose": "", "bare": "worker", "fresh": "worker"}
	var last map[string]map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		last = map[string]map[string]string{}
		for name, group := range want {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last[name] = n.Labels
			if have, ok := n.Labels[deckhousev1.NodeGroupRestrictedLabel]; have != group || ok != (group != "") {
				return false, nil
			}
		}
		return last["fresh"]["tier"] == "db", nil
	}); err != nil {
		t.Fatalf("restricted group labels: want %v (\"\" for none), have labels %v: %v", want, last, err)
	}
	// The node's own label is left as it is: it is the node's.
	if last["rogue"][deckhousev1.NodeGroupLabel] != "master" {
		t.Errorf("rogue's own group label was changed: %v", last["rogue"])
	}
}

func TestRestrictedGroup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		group  string
		want   string // "" nothing, "-" remove, else the value set
	}{
		{"absent, group known", nil, "worker", "worker"},
		{"another group", map[string]string{deckhousev1.NodeGroupRestrictedLabel: "master"}, "worker", "worker"},
		{"empty value", map[string]string{deckhousev1.NodeGroupRestrictedLabel: ""}, "worker", "worker"},
		{"already right", map[string]string{deckhousev1.NodeGroupRestrictedLabel: "worker"}, "worker", ""},
		{"no group, present", map[string]string{deckhousev1.NodeGroupRestrictedLabel: "master"}, "", "-"},
		{"no group, absent", map[string]string{deckhousev1.NodeGroupLabel: "master"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := RestrictedGroup(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}}, tc.group)
			v, ok := ch.Labels[deckhousev1.NodeGroupRestrictedLabel]
			got := ""
			switch {
			case ok && v == nil:
				got = "-"
			case ok:
				got = *v
			}
			if got != tc.want || len(ch.Labels) > 1 || len(ch.Annotations) > 0 || ch.Taints != nil {
				t.Errorf("RestrictedGroup(%v, %q) = %s (%v), want %q", tc.labels, tc.group, ch.String(), got, tc.want)
			}
		})
	}
}
