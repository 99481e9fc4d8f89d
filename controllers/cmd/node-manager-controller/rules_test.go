package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/controllers"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
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
	metricRE  = regexp.MustCompile(`\b((?:node_|d8_)[a-z0-9_]+)\b`)
	matcherRE = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
	byRE      = regexp.MustCompile(`\b(?:by|on)\s*\(([^)]*)\)`)
	useRE     = regexp.MustCompile(`\$labels\.([a-z_]+)`)
	braceRE   = regexp.MustCompile(`\{[^}]*\}`)
)

// TestAlertsUseExportedMetricsAndLabels checks every PrometheusRule in
// manifests/monitoring against the metrics the binary registers: each
// metric exists, each label matched or grouped by is one of its labels, and
// each $labels.X in an alert's text survives the expression's aggregation.
// (Deckhouse once shipped an alert quoting a label its metric did not have.)
func TestAlertsUseExportedMetricsAndLabels(t *testing.T) {
	reg := &recording{Registry: prometheus.NewRegistry(), labels: map[string][]string{}}
	deps := manager.NewDepsForClients(kubefake.NewClientset(), nmfake.NewClientset(), manager.NewOptions(), clock.RealClock{}, reg)
	manager.New(deps, manager.NewOptions(), controllers.All(deps)...)
	for _, want := range []string{"node_group_node_status", "d8_node_draining", "node_manager_node_drain_failed", "node_manager_nodes_waiting", "d8_unmanaged_nodes_on_cluster", "node_manager_leader"} {
		if _, ok := reg.labels[want]; !ok {
			t.Errorf("the binary does not register %s", want)
		}
	}

	data, err := os.ReadFile(filepath.Join("..", "..", "..", "manifests", "monitoring", "prometheus-rules.yaml"))
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
	alerts := 0
	for _, g := range doc.Spec.Groups {
		for _, r := range g.Rules {
			alerts++
			var labels []string
			names := byRE.ReplaceAllString(braceRE.ReplaceAllString(r.Expr, ""), "")
			for _, m := range metricRE.FindAllStringSubmatch(names, -1) {
				ls, ok := reg.labels[m[1]]
				if !ok {
					t.Errorf("alert %s uses %s, which node-manager-controller does not export", r.Alert, m[1])
				}
				labels = append(labels, ls...)
			}
			var used []string
			for _, m := range matcherRE.FindAllStringSubmatch(r.Expr, -1) {
				used = append(used, m[1])
			}
			var kept []string
			for _, m := range byRE.FindAllStringSubmatch(r.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					l = strings.TrimSpace(l)
					used, kept = append(used, l), append(kept, l)
				}
			}
			for _, l := range used {
				if !slices.Contains(labels, l) {
					t.Errorf("alert %s uses label %q, which none of its metrics has (they have %v)", r.Alert, l, labels)
				}
			}
			for _, text := range r.Annotations {
				for _, m := range useRE.FindAllStringSubmatch(text, -1) {
					if !slices.Contains(kept, m[1]) {
						t.Errorf("alert %s quotes $labels.%s, which its expression does not keep (by %v)", r.Alert, m[1], kept)
					}
				}
			}
		}
	}
	if alerts < 4 {
		t.Errorf("%d alerts; want at least a stuck update, a manual disruption, a stuck drain and an unmanaged node", alerts)
	}
}
