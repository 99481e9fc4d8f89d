package clusterapi

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodes"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

func indexer(t *testing.T, objs ...any) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func unstructuredOf(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestCAPSSeriesAreDeckhouses: each MachineDeployment node-manager keeps
// has Deckhouse's five d8_caps_md_* series (unavailable = replicas minus
// available, never negative; the phase numbered as Deckhouse numbers it),
// one it does not keep has none; a Ready node of a Cluster API group that
// no Machine backs is node_manager_caps_unmanaged_node, a backed one, a
// NotReady one and a node of a group without staticInstances are not.
func TestCAPSSeriesAreDeckhouses(t *testing.T) {
	const ns = deckhousev1.Namespace
	md := func(name string, managed bool, desired, replicas, ready, available int32, phase clusterv1.MachineDeploymentPhase) *unstructured.Unstructured {
		o := &clusterv1.MachineDeployment{TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       clusterv1.MachineDeploymentSpec{Replicas: ptr.To(desired)},
			Status: clusterv1.MachineDeploymentStatus{Replicas: ptr.To(replicas), ReadyReplicas: ptr.To(ready),
				AvailableReplicas: ptr.To(available), Phase: string(phase)}}
		if managed {
			o.Labels = groupLabels(name)
		}
		return unstructuredOf(t, o)
	}
	machine := func(name, node string) *unstructured.Unstructured {
		m := &clusterv1.Machine{TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		m.Status.NodeRef.Name = node
		return unstructuredOf(t, m)
	}
	node := readyNode
	inst := func(name, group string) *deckhousev1alpha1.Instance {
		return &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: group}}}
	}
	static := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "static"}, Spec: deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeStatic, StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 2}}}
	byHand := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "by-hand"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}

	mdRes, mRes := machineDeploymentsResource.GroupResource(), machinesResource.GroupResource()
	c := &Controller{
		d: &manager.Deps{Namespace: ns, Nodes: nodes.NewCache(
			corelisters.NewNodeLister(indexer(t, node("backed", true), node("joined-by-hand", true), node("down", false), node("other", true))),
			nmlistersv1alpha1.NewInstanceLister(indexer(t, inst("backed", "static"), inst("joined-by-hand", "static"), inst("down", "static"), inst("other", "by-hand"))),
			clock.RealClock{})},
		groups: nmlisters.NewNodeGroupLister(indexer(t, static, byHand)),
		mds: cache.NewGenericLister(indexer(t,
			md("static", true, 3, 3, 2, 1, clusterv1.MachineDeploymentPhaseScalingUp),
			md("over", true, 1, 1, 1, 2, clusterv1.MachineDeploymentPhaseRunning),
			md("someone-elses", false, 1, 1, 1, 1, clusterv1.MachineDeploymentPhaseRunning)), mdRes),
		machines: cache.NewGenericLister(indexer(t, machine("m1", "backed"), machine("m2", "")), mRes),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newSeries(c))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetValue())
			}
			got = append(got, fmt.Sprintf("%s%v %g", mf.GetName(), ls, m.GetGauge().GetValue()))
		}
	}
	slices.Sort(got)
	want := []string{
		"d8_caps_md_desired[over] 1", "d8_caps_md_desired[static] 3",
		"d8_caps_md_phase[over] 1", "d8_caps_md_phase[static] 2",
		"d8_caps_md_ready[over] 1", "d8_caps_md_ready[static] 2",
		"d8_caps_md_replicas[over] 1", "d8_caps_md_replicas[static] 3",
		"d8_caps_md_unavailable[over] 0", "d8_caps_md_unavailable[static] 2",
		"node_manager_caps_unmanaged_node[joined-by-hand static] 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("series:\n got %v\nwant %v", got, want)
	}
}
