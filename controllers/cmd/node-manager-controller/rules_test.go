package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	fencingagent "github.com/node-manager/node-manager/agents/fencing-agent/agent"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/controllers"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
	"github.com/node-manager/node-manager/manifests"
	"github.com/node-manager/node-manager/registry"
)

// recording is a registry that remembers every metric's labels.
type recording struct {
	*prometheus.Registry
	labels map[string][]string
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (r *recording) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := descRE.FindStringSubmatch(d.String()); m != nil {
			var ls []string
			if m[2] != "" {
				ls = strings.Split(m[2], ",")
			}
			r.labels[m[1]] = ls
		}
	}
	return r.Registry.Register(c)
}

func (r *recording) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var (
	metricRE  = regexp.MustCompile(`\b((?:node_|d8_|bashible_apiserver_|fencing_agent_)[a-z0-9_]+)\b`)
	matcherRE = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
	byRE      = regexp.MustCompile(`\b(?:by|on)\s*\(([^)]*)\)`)
	useRE     = regexp.MustCompile(`\$labels\.([a-z_]+)`)
	braceRE   = regexp.MustCompile(`\{[^}]*\}`)
	// labelValuesRE is Grafana's label_values(metric, label): the label is
	// not a metric.
	labelValuesRE = regexp.MustCompile(`label_values\(\s*([a-z0-9_]+)\s*,\s*([a-z_]+)\s*\)`)
)

// metricInventory is every metric node-manager exports, with its labels:
// node-manager-controller's (every controller registered as the binary
// does), bashible-apiserver's and the fencing agents' (with node and
// node_group, which their PodMonitor adds). A histogram's _bucket, _sum and _count
// series are listed too (_bucket with le). The alert rules and the Grafana
// dashboard are checked against it.
func metricInventory(t *testing.T) map[string][]string {
	t.Helper()
	reg := &recording{Registry: prometheus.NewRegistry(), labels: map[string][]string{}}
	// With --cluster-api, so the Cluster API controller's series are listed.
	opts, ctl := manager.NewOptions(), controllers.NewOptions()
	ctl.ClusterAPI.Enabled = true
	deps := manager.NewDepsForClients(kubefake.NewClientset(), nmfake.NewClientset(), opts, clock.RealClock{}, reg)
	deps.Dynamic = dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	all := func(d *manager.Deps) []manager.Controller { return controllers.All(d, ctl) }
	all(deps)
	manager.New(deps, opts, all)
	reg.MustRegister(bundles.NewMetrics().Collectors()...)
	reg.MustRegister(registry.NewMetrics().Collectors()...)
	agents := &recording{Registry: prometheus.NewRegistry(), labels: map[string][]string{}}
	agents.MustRegister(fencingagent.New(fencingagent.Config{NodeName: "node", Group: "group"}, kubefake.NewClientset(), nil, nil, nil, clock.RealClock{}).Collectors()...)
	for name, ls := range agents.labels {
		reg.labels[name] = append(ls, "node", "node_group")
	}
	inv := map[string][]string{}
	for name, ls := range reg.labels {
		inv[name] = ls
		for _, suffix := range []string{"_sum", "_count"} {
			inv[name+suffix] = ls
		}
		inv[name+"_bucket"] = append(slices.Clone(ls), "le")
	}
	return inv
}

// checkExpr reports a metric of expr that inv does not have, or a label
// matched or grouped by that none of expr's metrics has; it returns the
// labels the expression's by/on clauses keep.
func checkExpr(t *testing.T, where, expr string, inv map[string][]string) (kept []string) {
	t.Helper()
	var labels []string
	names := labelValuesRE.ReplaceAllString(expr, "$1")
	names = byRE.ReplaceAllString(braceRE.ReplaceAllString(names, ""), "")
	for _, m := range metricRE.FindAllStringSubmatch(names, -1) {
		ls, ok := inv[m[1]]
		if !ok {
			t.Errorf("%s uses %s, which node-manager does not export", where, m[1])
		}
		labels = append(labels, ls...)
	}
	var used []string
	for _, m := range matcherRE.FindAllStringSubmatch(expr, -1) {
		used = append(used, m[1])
	}
	for _, m := range labelValuesRE.FindAllStringSubmatch(expr, -1) {
		used = append(used, m[2])
	}
	for _, m := range byRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			l = strings.TrimSpace(l)
			used, kept = append(used, l), append(kept, l)
		}
	}
	for _, l := range used {
		if !slices.Contains(labels, l) {
			t.Errorf("%s uses label %q, which none of its metrics has (they have %v)", where, l, labels)
		}
	}
	return kept
}

// TestAlertsUseExportedMetricsAndLabels checks every PrometheusRule in
// manifests/monitoring against the metrics the binaries register: each
// metric exists, each label matched or grouped by is one of its labels, and
// each $labels.X in an alert's text survives the expression's aggregation.
// (Deckhouse once shipped an alert quoting a label its metric did not have.)
// What the alerts do on given series is tested by promtool (make test-rules).
func TestAlertsUseExportedMetricsAndLabels(t *testing.T) {
	inv := metricInventory(t)
	for _, want := range []string{"node_group_node_status", "node_manager_node_ready", "d8_node_draining", "node_manager_node_drain_failed",
		"node_manager_nodes_waiting", "d8_unmanaged_nodes_on_cluster", "d8_nodegroup_taint_missing", "node_manager_leader",
		"fencing_agent_armed", "fencing_agent_maintenance"} {
		if _, ok := inv[want]; !ok {
			t.Errorf("the binary does not register %s", want)
		}
	}

	data, err := manifests.FS.ReadFile("monitoring/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					For         string            `json:"for"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		t.Fatalf("prometheus-rules.yaml: %v", err)
	}
	var names []string
	for _, g := range doc.Spec.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			kept := checkExpr(t, "alert "+r.Alert, r.Expr, inv)
			for _, text := range r.Annotations {
				for _, m := range useRE.FindAllStringSubmatch(text, -1) {
					if !slices.Contains(kept, m[1]) {
						t.Errorf("alert %s quotes $labels.%s, which its expression does not keep (by %v)", r.Alert, m[1], kept)
					}
				}
			}
		}
	}
	for _, want := range []string{"D8NodeIsNotUpdating", "D8NodeGroupIsNotUpdating", "D8NodeUpdateStuckWaitingForDisruptionApproval",
		"NodeRequiresDisruptionApprovalForUpdate", "NodeStuckInDrainingForDisruptionDuringUpdate", "D8NodeIsUnmanaged", "NodeGroupMasterTaintIsAbsent"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s: Deckhouse users route it by that name", want)
		}
	}
}
