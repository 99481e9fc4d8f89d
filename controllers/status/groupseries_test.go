package status

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
)

// TestGroupSeriesAreDeckhousesFamily: every NodeGroup has the nine
// d8_node_group_* series Deckhouse's dashboards and alerts read, labelled
// node_group_name, with its status's values (an unknown count is 0, an
// Error condition True is has_errors 1); a deleted group's series go.
func TestGroupSeriesAreDeckhousesFamily(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	worker := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Status: deckhousev1.NodeGroupStatus{
		Nodes: 5, Ready: 4, UpToDate: 3, Instances: ptr.To[int32](5), Desired: ptr.To[int32](6), Standby: 1,
		Conditions: []metav1.Condition{{Type: ConditionError, Status: metav1.ConditionTrue}}}}
	master := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "master"}, Status: deckhousev1.NodeGroupStatus{
		Nodes: 3, Ready: 3, UpToDate: 3, Conditions: []metav1.Condition{{Type: ConditionError, Status: metav1.ConditionFalse}}}}
	for _, g := range []*deckhousev1.NodeGroup{worker, master} {
		if err := idx.Add(g); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewGroupSeries(nmlisters.NewNodeGroupLister(idx)))

	got := gather(t, reg)
	want := []string{
		"d8_node_group_desired{master} 0", "d8_node_group_desired{worker} 6",
		"d8_node_group_has_errors{master} 0", "d8_node_group_has_errors{worker} 1",
		"d8_node_group_instances{master} 0", "d8_node_group_instances{worker} 5",
		"d8_node_group_max{master} 0", "d8_node_group_max{worker} 0",
		"d8_node_group_min{master} 0", "d8_node_group_min{worker} 0",
		"d8_node_group_nodes{master} 3", "d8_node_group_nodes{worker} 5",
		"d8_node_group_ready{master} 3", "d8_node_group_ready{worker} 4",
		"d8_node_group_standby{master} 0", "d8_node_group_standby{worker} 1",
		"d8_node_group_up_to_date{master} 3", "d8_node_group_up_to_date{worker} 3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("series:\n got %v\nwant %v", got, want)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 18 {
		t.Errorf("%d series (%v), want 9 per group", n, err)
	}

	if err := idx.Delete(worker); err != nil {
		t.Fatal(err)
	}
	for _, s := range gather(t, reg) {
		if strings.Contains(s, "{worker}") {
			t.Errorf("the deleted group kept %s", s)
		}
	}
	if n, _ := testutil.GatherAndCount(reg); n != 9 {
		t.Errorf("%d series after worker went, want master's 9", n)
	}
}

// gather lists reg's series as "name{node_group_name} value".
func gather(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var group string
			for _, l := range m.GetLabel() {
				if l.GetName() == groupNameLabel {
					group = l.GetValue()
				}
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), group, m.GetGauge().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}
