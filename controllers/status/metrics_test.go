package status

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// series gathers reg as "name{node,group,status} value" lines.
func series(t *testing.T, reg *prometheus.Registry, names ...string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s,%s,%s} %g", mf.GetName(), l["node"], l["node_group"], l["status"], m.GetGauge().GetValue()))
		}
	}
	slices.Sort(out)
	return out
}

// TestNodeSeriesFollowTheNodes: each node of a group has its one-hot
// update state over every state and its readiness; a node that leaves
// the group, and a group that goes, lose their series.
func TestNodeSeriesFollowTheNodes(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := &Controller{metrics: newMetrics(reg)}
	g := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w"}}
	c.export("w", g, []*corev1.Node{
		node("a", "w", true, deckhousev1.ConfigurationChecksumAnnotation, "new"),
		node("b", "w", false, deckhousev1.WaitingForApprovalAnnotation, ""),
	}, "new")
	c.export("m", &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "m"}}, []*corev1.Node{node("m1", "m", true)}, "new")

	got := series(t, reg, "node_group_node_status", "node_manager_node_ready")
	if want := 3 * (len(nodes.States) + 1); len(got) != want {
		t.Fatalf("%d series, want %d: %v", len(got), want, got)
	}
	for _, want := range []string{
		"node_group_node_status{a,w,UpToDate} 1", "node_group_node_status{a,w,ToBeUpdated} 0",
		"node_group_node_status{b,w,WaitingForApproval} 1", "node_group_node_status{b,w,UpToDate} 0",
		"node_group_node_status{m1,m,UpdateFailedNoConfigChecksum} 1",
		"node_manager_node_ready{a,w,} 1", "node_manager_node_ready{b,w,} 0", "node_manager_node_ready{m1,m,} 1",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no %s in %v", want, got)
		}
	}
	ones := 0
	for _, s := range got {
		if strings.HasPrefix(s, "node_group_node_status{") && strings.HasSuffix(s, " 1") {
			ones++
		}
	}
	if ones != 3 {
		t.Errorf("%d states set to 1, want one per node: %v", ones, got)
	}

	// b leaves w; then w goes.
	c.export("w", g, []*corev1.Node{node("a", "w", true, deckhousev1.ConfigurationChecksumAnnotation, "new")}, "new")
	for _, s := range series(t, reg, "node_group_node_status", "node_manager_node_ready") {
		if strings.Contains(s, "{b,") {
			t.Errorf("b left the group but kept %s", s)
		}
	}
	c.export("w", nil, nil, "new")
	for _, s := range series(t, reg, "node_group_node_status", "node_manager_node_ready") {
		if strings.Contains(s, "{a,") {
			t.Errorf("group w is gone but %s is left", s)
		}
	}
	if got := series(t, reg, "node_manager_node_ready"); len(got) != 1 {
		t.Errorf("group m's series should stay: %v", got)
	}
}
