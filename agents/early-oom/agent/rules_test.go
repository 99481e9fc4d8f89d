package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

var (
	earlyOOMMetricRE = regexp.MustCompile(`\bearly_oom_[a-z0-9_]+\b`)
	matcherLabelRE   = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
	groupingRE       = regexp.MustCompile(`\b(?:by|on)\s*\(([^)]*)\)`)
)

// TestAlertsUseTheAgentsMetricsAndLabels checks manifests/monitoring/
// early-oom-rules.yaml against what the agent registers: each metric
// exists, and each label matched or grouped by is one of its labels or
// node, which the PodMonitor adds. What the alerts do on given series is
// tested by promtool (make test-rules).
func TestAlertsUseTheAgentsMetricsAndLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(testOptions(t, t.TempDir()), nil, reg); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{}
	for _, f := range families {
		ls := []string{"node"}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName())
			}
		}
		labels[f.GetName()] = ls
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "manifests", "monitoring", "early-oom-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range doc.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			var have []string
			for _, name := range earlyOOMMetricRE.FindAllString(r.Expr, -1) {
				ls, ok := labels[name]
				if !ok {
					t.Errorf("alert %s uses %s, which the agent does not export", r.Alert, name)
				}
				have = append(have, ls...)
			}
			var used []string
			for _, m := range matcherLabelRE.FindAllStringSubmatch(r.Expr, -1) {
				used = append(used, m[1])
			}
			for _, m := range groupingRE.FindAllStringSubmatch(r.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					used = append(used, strings.TrimSpace(l))
				}
			}
			for _, l := range used {
				if !slices.Contains(have, l) {
					t.Errorf("alert %s uses label %q, which its metrics do not have (%v)", r.Alert, l, have)
				}
			}
		}
	}
	if !slices.Contains(alerts, "EarlyOOMPodIsNotReady") {
		t.Error("no alert EarlyOOMPodIsNotReady: Deckhouse users route it by that name")
	}
}
