package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/manifests"
)

// TestDashboardUsesExportedMetrics reads the Grafana dashboard shipped in
// manifests/monitoring/grafana and checks every PromQL expression of its
// panels and template variables against the metric inventory the alerts
// are checked against: no panel may chart a metric node-manager does not
// export, or group by a label it does not have.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	inv := metricInventory(t)
	data, err := manifests.FS.ReadFile("monitoring/grafana/node-manager.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("node-manager.json: %v", err)
	}
	exprs := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs++
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q has an empty expression", p.Title)
				}
				checkExpr(t, fmt.Sprintf("panel %q", p.Title), tg.Expr, inv)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Fatalf("variable %s: unreadable query %s", v.Name, v.Query)
			}
			q.Query = s
		}
		exprs++
		checkExpr(t, "variable "+v.Name, q.Query, inv)
	}
	// The panels the issue asks for, by what they chart.
	all := string(data)
	for _, want := range []string{`node_group_node_status{status=\"UpToDate\"`, "d8_node_draining", "bashible_apiserver_render_errors_total", "bashible_apiserver_requests_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("the dashboard charts nothing from %s", want)
		}
	}
	if exprs < 10 {
		t.Errorf("%d expressions in the dashboard; the test read too little of it", exprs)
	}
}

// TestScrapeConfigurationShape checks the ServiceMonitors of
// manifests/monitoring without the Prometheus operator's CRDs: each selects
// a Service of this directory or of manifests/ by its labels, names a port
// that Service has, scrapes /metrics over HTTPS and sends the scraper's
// token (both components refuse a scrape without one).
func TestScrapeConfigurationShape(t *testing.T) {
	type object struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Ports []struct {
				Name string `json:"name"`
			} `json:"ports"`
			Endpoints []struct {
				Port            string `json:"port"`
				Path            string `json:"path"`
				Scheme          string `json:"scheme"`
				BearerTokenFile string `json:"bearerTokenFile"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	var objs []object
	for _, f := range []string{"monitoring/servicemonitors.yaml", "bashible-apiserver/service.yaml"} {
		data, err := manifests.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for doc := range strings.SplitSeq(string(data), "\n---\n") {
			var o object
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, o)
		}
	}
	monitors := 0
	for _, m := range objs {
		if m.Kind != "ServiceMonitor" {
			continue
		}
		monitors++
		if m.APIVersion != "monitoring.coreos.com/v1" || m.Metadata.Namespace == "" || len(m.Spec.Selector.MatchLabels) == 0 || len(m.Spec.Endpoints) == 0 {
			t.Errorf("ServiceMonitor %s: want monitoring.coreos.com/v1 with a namespace, a label selector and endpoints", m.Metadata.Name)
			continue
		}
		var svc *object
		for i, o := range objs {
			if o.Kind != "Service" || o.Metadata.Namespace != m.Metadata.Namespace {
				continue
			}
			match := true
			for k, v := range m.Spec.Selector.MatchLabels {
				match = match && o.Metadata.Labels[k] == v
			}
			if match {
				svc = &objs[i]
			}
		}
		if svc == nil {
			t.Errorf("ServiceMonitor %s selects no Service in %s", m.Metadata.Name, m.Metadata.Namespace)
			continue
		}
		for _, e := range m.Spec.Endpoints {
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == e.Port
			}
			if !found {
				t.Errorf("ServiceMonitor %s: Service %s has no port %q", m.Metadata.Name, svc.Metadata.Name, e.Port)
			}
			if e.Path != "/metrics" || e.Scheme != "https" || e.BearerTokenFile == "" {
				t.Errorf("ServiceMonitor %s: want path /metrics, scheme https and a bearer token; got %+v", m.Metadata.Name, e)
			}
		}
	}
	if monitors != 2 {
		t.Errorf("%d ServiceMonitors; want node-manager-controller's and bashible-apiserver's", monitors)
	}
}
