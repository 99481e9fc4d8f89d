package nodetemplate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

const cloudUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

// foreign is what other actors put on every test node: none of it may
// ever be changed by the controller.
var foreign = expect{
	labels:      map[string]string{"topology.kubernetes.io/zone": "zone-a", "example.com/owner": "someone-else"},
	annotations: map[string]string{"csi.volume.kubernetes.io/nodeid": `{"csi.example.com":"n"}`},
	taints: []corev1.Taint{
		{Key: cloudUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/maintenance", Value: "planned", Effect: corev1.TaintEffectNoExecute},
	},
}

// expect is a partial view of a node: what it must carry and what it must not.
type expect struct {
	labels        map[string]string
	noLabels      []string
	annotations   map[string]string
	noAnnotations []string
	taints        []corev1.Taint
	// noTaints are keys no taint of the node may have.
	noTaints []string
}

func (e expect) and(o expect) expect {
	r := expect{labels: map[string]string{}, annotations: map[string]string{}}
	for _, x := range []expect{e, o} {
		for k, v := range x.labels {
			r.labels[k] = v
		}
		for k, v := range x.annotations {
			r.annotations[k] = v
		}
		r.noLabels = append(r.noLabels, x.noLabels...)
		r.noAnnotations = append(r.noAnnotations, x.noAnnotations...)
		r.taints = append(r.taints, x.taints...)
		r.noTaints = append(r.noTaints, x.noTaints...)
	}
	return r
}

// mismatch describes how n differs from e, or is "" when it does not.
func (e expect) mismatch(n *corev1.Node) string {
	var out []string
	for k, v := range e.labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			out = append(out, fmt.Sprintf("label %s=%q missing (have %q, %v)", k, v, got, ok))
		}
	}
	for _, k := range e.noLabels {
		if _, ok := n.Labels[k]; ok {
			out = append(out, "label "+k+" present")
		}
	}
	for k, v := range e.annotations {
		if got, ok := n.Annotations[k]; !ok || got != v {
			out = append(out, fmt.Sprintf("annotation %s=%q missing (have %q, %v)", k, v, got, ok))
		}
	}
	for _, k := range e.noAnnotations {
		if _, ok := n.Annotations[k]; ok {
			out = append(out, "annotation "+k+" present")
		}
	}
	for _, t := range e.taints {
		if !slices.ContainsFunc(n.Spec.Taints, func(h corev1.Taint) bool {
			return h.Key == t.Key && h.Effect == t.Effect && h.Value == t.Value
		}) {
			out = append(out, "taint "+t.ToString()+" missing")
		}
	}
	for _, k := range e.noTaints {
		if slices.ContainsFunc(n.Spec.Taints, func(h corev1.Taint) bool { return h.Key == k }) {
			out = append(out, "taint "+k+" present")
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// waitNode waits until node name matches e, and fails naming the
// differences that remained.
func waitNode(t *testing.T, name string, e expect) *corev1.Node {
	t.Helper()
	var last string
	var node *corev1.Node
	err := wait.PollUntilContextTimeout(framework.Context(t), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if node == nil {
				last = err.Error()
			}
			return false, nil
		}
		node, last = n, e.mismatch(n)
		return last == "", nil
	})
	if err != nil {
		if node != nil {
			last += fmt.Sprintf("\ntaints: %v", node.Spec.Taints)
		}
		t.Fatalf("node %s: %v: %s", name, err, last)
	}
	return node
}

// registering is a Node in group (none when group is "") as a machine
// registers it: with the foreign metadata and the taints a fresh node
// carries.
func registering(name, group string) *corev1.Node {
	n := framework.NewNode(name, group)
	n.Annotations = map[string]string{}
	for k, v := range foreign.labels {
		n.Labels[k] = v
	}
	for k, v := range foreign.annotations {
		n.Annotations[k] = v
	}
	n.Spec.Taints = append(slices.Clone(foreign.taints), corev1.Taint{Key: deckhousev1.UninitializedTaint, Effect: corev1.TaintEffectNoSchedule})
	return n
}

// register creates a registering node of group and, for a group, the
// Instance node-manager-controller would make when it admits the node:
// the controller applies the template of the Instance's group only.
func register(t *testing.T, name, group string) *corev1.Node {
	t.Helper()
	if group != "" {
		f.TestInstance(t, framework.NewInstance(name, group))
	}
	return f.TestNode(t, registering(name, group))
}

// withTemplate is a framework.NewGroup mutation that sets the node template.
func withTemplate(tmpl *deckhousev1.NodeTemplate) func(*deckhousev1.NodeGroup) {
	return func(ng *deckhousev1.NodeGroup) { ng.Spec.NodeTemplate = tmpl }
}

// setTemplate replaces a group's nodeTemplate in one write, so the nodes
// never see an intermediate template.
func setTemplate(t *testing.T, group string, tmpl *deckhousev1.NodeTemplate) {
	t.Helper()
	ctx := framework.Context(t)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ng.Spec.NodeTemplate = tmpl
		_, err = f.NM.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set the template of %s: %v", group, err)
	}
}

func roleOf(group string) string { return deckhousev1.NodeRoleLabelPrefix + group }

// The template's labels, annotations and taints are added, changed and
// removed on every node of the group, while the labels, annotations and
// taints other actors put there survive every step, the first one included.
func TestTemplateAddChangeRemove(t *testing.T) {
	// One node exists before its group (reached through the NodeGroup's
	// event), one registers after it (reached through its own).
	register(t, "tmpl-early", "tmpl")
	f.TestGroup(t, framework.NewGroup("tmpl", withTemplate(&deckhousev1.NodeTemplate{
		Labels:      map[string]string{"example.com/tier": "db", "example.com/gone": "soon"},
		Annotations: map[string]string{"example.com/contact": "team-a"},
		Taints: []deckhousev1.Taint{
			{Key: "example.com/dedicated", Value: "db", Effect: "NoSchedule"},
			{Key: "example.com/gone", Effect: "PreferNoSchedule"},
		},
	})))
	register(t, "tmpl-late", "tmpl")

	applied := foreign.and(expect{
		labels: map[string]string{
			deckhousev1.NodeTypeLabel: "Static", roleOf("tmpl"): "",
			"example.com/tier": "db", "example.com/gone": "soon",
		},
		annotations: map[string]string{"example.com/contact": "team-a", deckhousev1.ScaleDownDisabledAnnotation: "true"},
		taints: []corev1.Taint{
			{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/gone", Effect: corev1.TaintEffectPreferNoSchedule},
		},
		noTaints: []string{deckhousev1.UninitializedTaint},
	})
	for _, n := range []string{"tmpl-early", "tmpl-late"} {
		node := waitNode(t, n, applied)
		if _, ok := node.Annotations[deckhousev1.LastAppliedNodeTemplateAnnotation]; !ok {
			t.Errorf("node %s has no %s annotation", n, deckhousev1.LastAppliedNodeTemplateAnnotation)
		}
	}

	// Change a label and a taint's value, add a label and a taint, remove a
	// label, an annotation and a taint.
	setTemplate(t, "tmpl", &deckhousev1.NodeTemplate{
		Labels: map[string]string{"example.com/tier": "web", "example.com/new": ""},
		Taints: []deckhousev1.Taint{
			{Key: "example.com/dedicated", Value: "web", Effect: "NoSchedule"},
			{Key: "example.com/batch", Effect: "NoExecute"},
		},
	})
	changed := foreign.and(expect{
		labels:        map[string]string{deckhousev1.NodeTypeLabel: "Static", roleOf("tmpl"): "", "example.com/tier": "web", "example.com/new": ""},
		noLabels:      []string{"example.com/gone"},
		annotations:   map[string]string{deckhousev1.ScaleDownDisabledAnnotation: "true"},
		noAnnotations: []string{"example.com/contact"},
		taints: []corev1.Taint{
			{Key: "example.com/dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/batch", Effect: corev1.TaintEffectNoExecute},
		},
		noTaints: []string{"example.com/gone", deckhousev1.UninitializedTaint},
	})
	for _, n := range []string{"tmpl-early", "tmpl-late"} {
		node := waitNode(t, n, changed)
		if c := countTaints(node, "example.com/dedicated"); c != 1 {
			t.Errorf("node %s has %d example.com/dedicated taints, want 1: %v", n, c, node.Spec.Taints)
		}
	}

	// Remove the whole template: only what the template put there goes.
	setTemplate(t, "tmpl", nil)
	for _, n := range []string{"tmpl-early", "tmpl-late"} {
		waitNode(t, n, foreign.and(expect{
			labels:        map[string]string{deckhousev1.NodeTypeLabel: "Static", roleOf("tmpl"): ""},
			noLabels:      []string{"example.com/tier", "example.com/new"},
			annotations:   map[string]string{deckhousev1.ScaleDownDisabledAnnotation: "true"},
			noAnnotations: []string{"example.com/contact"},
			noTaints:      []string{"example.com/dedicated", "example.com/batch", deckhousev1.UninitializedTaint},
		}))
	}
}

func countTaints(n *corev1.Node, key string) int {
	c := 0
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			c++
		}
	}
	return c
}

// The first apply of an empty template keeps every taint but node-manager's
// own (Deckhouse PR 22958 stripped the cloud provider's taint here), and
// master nodes get the control-plane role.
func TestFirstApplyKeepsForeignTaintsOnMaster(t *testing.T) {
	f.TestGroup(t, framework.NewGroup("master", framework.OfType(deckhousev1.NodeTypeCloudPermanent)))
	register(t, "master-0", "master")
	waitNode(t, "master-0", foreign.and(expect{
		labels: map[string]string{
			deckhousev1.NodeTypeLabel: "CloudPermanent", roleOf("master"): "", deckhousev1.ControlPlaneRoleLabel: "",
		},
		annotations: map[string]string{deckhousev1.ScaleDownDisabledAnnotation: "true"},
		noTaints:    []string{deckhousev1.UninitializedTaint},
	}))
}

// A CloudEphemeral machine not made by Cluster API got its template from
// its machine controller: only the uninitialized taint is removed.
func TestCloudEphemeralGetsOnlyTheTaintFixUp(t *testing.T) {
	f.TestGroup(t, framework.NewGroup("ephemeral", framework.OfType(deckhousev1.NodeTypeCloudEphemeral), withTemplate(&deckhousev1.NodeTemplate{
		Labels: map[string]string{"example.com/tier": "batch"},
	})))
	register(t, "ephemeral-0", "ephemeral")
	node := waitNode(t, "ephemeral-0", foreign.and(expect{
		noLabels:      []string{"example.com/tier", deckhousev1.NodeTypeLabel},
		noAnnotations: []string{deckhousev1.LastAppliedNodeTemplateAnnotation, deckhousev1.ScaleDownDisabledAnnotation},
		noTaints:      []string{deckhousev1.UninitializedTaint},
	}))
	if len(node.Spec.Taints) < len(foreign.taints) {
		t.Errorf("taints = %v, want the foreign ones kept", node.Spec.Taints)
	}
}

// A template that names node-manager's own taint, or a label the Node API
// would refuse, is warned about on the NodeGroup; the rest of the template
// is applied and the uninitialized taint is still removed, not fought over.
func TestSkippedTemplateKeys(t *testing.T) {
	f.TestGroup(t, framework.NewGroup("reserved", withTemplate(&deckhousev1.NodeTemplate{
		Labels: map[string]string{"example.com/ok": "1", "example.com/bad": "not a label value"},
		Taints: []deckhousev1.Taint{{Key: deckhousev1.UninitializedTaint, Effect: "NoSchedule"}},
	})))
	register(t, "reserved-0", "reserved")
	waitNode(t, "reserved-0", foreign.and(expect{
		labels:   map[string]string{"example.com/ok": "1"},
		noLabels: []string{"example.com/bad"},
		noTaints: []string{deckhousev1.UninitializedTaint},
	}))
	framework.Poll(t, "a "+nodetemplate.ReasonSkippedKeys+" event on NodeGroup reserved", func(ctx context.Context) (bool, error) {
		evs, err := f.Kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == nodetemplate.ReasonSkippedKeys && e.Regarding.Kind == "NodeGroup" && e.Regarding.Name == "reserved" &&
				e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, deckhousev1.UninitializedTaint) && strings.Contains(e.Note, "example.com/bad") {
				return true, nil
			}
		}
		return false, nil
	})
}

// A node without a group is reported by the unmanaged-node gauge and left
// alone; a node of a group that does not exist is left alone until the
// group appears; joining a group ends the gauge's series.
func TestUnmanagedAndUnknownGroupNodes(t *testing.T) {
	register(t, "ghost-0", "ghost")
	register(t, "stray-0", "")
	framework.Poll(t, "the unmanaged gauge of stray-0", func(context.Context) (bool, error) {
		v, ok := unmanagedGauge("stray-0")
		return ok && v == 1, nil
	})
	if _, ok := unmanagedGauge("ghost-0"); ok {
		t.Error("a node with a group label is counted as unmanaged")
	}
	// ghost-0 was queued before stray-0, so by now it has been seen.
	for _, name := range []string{"ghost-0", "stray-0"} {
		n, err := f.Kube.CoreV1().Nodes().Get(framework.Context(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if countTaints(n, deckhousev1.UninitializedTaint) != 1 || nodes.Has(n, deckhousev1.LastAppliedNodeTemplateAnnotation) || n.Labels[deckhousev1.NodeTypeLabel] != "" {
			t.Errorf("node %s was changed: labels %v, annotations %v, taints %v", name, n.Labels, n.Annotations, n.Spec.Taints)
		}
	}

	f.TestGroup(t, framework.NewGroup("ghost"))
	waitNode(t, "ghost-0", foreign.and(expect{
		labels:   map[string]string{deckhousev1.NodeTypeLabel: "Static", roleOf("ghost"): ""},
		noTaints: []string{deckhousev1.UninitializedTaint},
	}))

	// stray-0 is labelled into ghost, and node-manager admits it there.
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"ghost"}}}`, deckhousev1.NodeGroupLabel)
	if _, err := f.Kube.CoreV1().Nodes().Patch(framework.Context(t), "stray-0", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.TestInstance(t, framework.NewInstance("stray-0", "ghost"))
	framework.Poll(t, "the unmanaged series of stray-0 to go", func(context.Context) (bool, error) {
		_, ok := unmanagedGauge("stray-0")
		return !ok, nil
	})
	waitNode(t, "stray-0", foreign.and(expect{
		labels:   map[string]string{deckhousev1.NodeTypeLabel: "Static", roleOf("ghost"): ""},
		noTaints: []string{deckhousev1.UninitializedTaint},
	}))
}

// unmanagedGauge reads d8_unmanaged_nodes_on_cluster{node} from the
// controller's registry.
func unmanagedGauge(node string) (float64, bool) {
	mfs, err := registry.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != nodetemplate.UnmanagedNodesMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" && l.GetValue() == node {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// A node that relabels itself into another group (the kubelet may write its
// Node's labels) keeps the template of the group its Instance pins: it never
// receives the other group's labels, and its own group's changes still
// reach it.
func TestRelabelledNodeKeepsItsInstancesTemplate(t *testing.T) {
	f.TestGroup(t, framework.NewGroup("plain", withTemplate(&deckhousev1.NodeTemplate{
		Labels: map[string]string{"example.com/plain": "1"},
	})))
	f.TestGroup(t, framework.NewGroup("privileged", withTemplate(&deckhousev1.NodeTemplate{
		Labels: map[string]string{"example.com/privileged": "1"},
	})))
	register(t, "turncoat-0", "plain")
	waitNode(t, "turncoat-0", foreign.and(expect{labels: map[string]string{"example.com/plain": "1"}}))

	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"privileged"}}}`, deckhousev1.NodeGroupLabel)
	if _, err := f.Kube.CoreV1().Nodes().Patch(framework.Context(t), "turncoat-0", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A change of plain's template, seen on the node, shows the controller
	// has looked at the node since the relabelling.
	setTemplate(t, "plain", &deckhousev1.NodeTemplate{Labels: map[string]string{"example.com/plain": "2"}})
	waitNode(t, "turncoat-0", foreign.and(expect{
		labels:   map[string]string{"example.com/plain": "2", deckhousev1.NodeGroupLabel: "privileged"},
		noLabels: []string{"example.com/privileged"},
	}))
}
