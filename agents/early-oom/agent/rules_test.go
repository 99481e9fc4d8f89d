package agent

import (
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
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
	data, err := manifests.FS.ReadFile("monitoring/early-oom-rules.yaml")
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

// TestPodMonitorScrapesTheDaemonSetsPods checks manifests/monitoring/
// podmonitors.yaml without the Prometheus operator: it selects the
// DaemonSet's pods, in their namespace, by a port they have, over HTTPS
// with a bearer token (the agent refuses a scrape without one).
func TestPodMonitorScrapesTheDaemonSetsPods(t *testing.T) {
	var monitor struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port          string `json:"port"`
				Path          string `json:"path"`
				Scheme        string `json:"scheme"`
				Authorization struct {
					Type        string `json:"type"`
					Credentials struct {
						Name string `json:"name"`
					} `json:"credentials"`
				} `json:"authorization"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	var ds struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					Containers []struct {
						Ports []struct {
							Name string `json:"name"`
						} `json:"ports"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	for name, into := range map[string]any{
		"monitoring/podmonitors.yaml":                         &monitor,
		path.Join(deckhousev1.EarlyOOMName, "daemonset.yaml"): &ds,
	} {
		data, err := manifests.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if monitor.Kind != "PodMonitor" || monitor.Metadata.Namespace != ds.Metadata.Namespace || len(monitor.Spec.Selector.MatchLabels) == 0 {
		t.Fatalf("want a PodMonitor in %s with a selector; got %+v", ds.Metadata.Namespace, monitor)
	}
	for k, v := range monitor.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the PodMonitor selects %s=%s, which the DaemonSet's pods do not carry", k, v)
		}
	}
	for _, e := range monitor.Spec.Endpoints {
		found := false
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				found = found || p.Name == e.Port
			}
		}
		if !found {
			t.Errorf("the PodMonitor scrapes port %q, which the DaemonSet's container does not name", e.Port)
		}
		if e.Path != "/metrics" || e.Scheme != "https" || e.Authorization.Type != "Bearer" || e.Authorization.Credentials.Name == "" {
			t.Errorf("want /metrics over https with a bearer token; got %+v", e)
		}
	}
	if len(monitor.Spec.Endpoints) == 0 {
		t.Error("the PodMonitor has no endpoint")
	}
}
