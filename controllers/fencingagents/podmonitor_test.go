package fencingagents

import (
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
)

// TestPodMonitorScrapesTheAgents checks manifests/monitoring/
// fencing-agent-podmonitor.yaml against the DaemonSets this controller
// makes, without the Prometheus operator: it selects their pods, in their
// namespace, by a port they have, over HTTPS with a bearer token (the
// agents refuse a scrape without one), and keeps the group label.
func TestPodMonitorScrapesTheAgents(t *testing.T) {
	data, err := manifests.FS.ReadFile("monitoring/fencing-agent-podmonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
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
				Scheme        string `json:"scheme"`
				Authorization struct {
					Type string `json:"type"`
				} `json:"authorization"`
				Relabelings []struct {
					SourceLabels []string `json:"sourceLabels"`
					TargetLabel  string   `json:"targetLabel"`
				} `json:"relabelings"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &monitor); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{deckhousev1.FencingModeWatchdog, deckhousev1.FencingModeNotify} {
		ng := &deckhousev1.NodeGroup{}
		ng.Name = "workers"
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: mode}
		ds := DaemonSet(ng, deckhousev1.Namespace, "image")
		if monitor.Kind != "PodMonitor" || monitor.Metadata.Namespace != ds.Namespace || len(monitor.Spec.Selector.MatchLabels) == 0 {
			t.Fatalf("want a PodMonitor in %s with a selector; got %+v", ds.Namespace, monitor)
		}
		for k, v := range monitor.Spec.Selector.MatchLabels {
			if ds.Spec.Template.Labels[k] != v {
				t.Errorf("%s: the PodMonitor selects %s=%s, the agents' pods are labelled %v", mode, k, v, ds.Spec.Template.Labels)
			}
		}
		if len(monitor.Spec.Endpoints) != 1 {
			t.Fatalf("want one endpoint, got %+v", monitor.Spec.Endpoints)
		}
		e := monitor.Spec.Endpoints[0]
		found := false
		for _, p := range ds.Spec.Template.Spec.Containers[0].Ports {
			found = found || p.Name == e.Port
		}
		if !found || e.Scheme != "https" || e.Authorization.Type != "Bearer" {
			t.Errorf("%s: endpoint %+v: want an HTTPS port of the agent's container with a bearer token", mode, e)
		}
		group := "__meta_kubernetes_pod_label_" + sanitize(deckhousev1.NodeGroupLabel)
		kept := false
		for _, r := range e.Relabelings {
			kept = kept || (len(r.SourceLabels) == 1 && r.SourceLabels[0] == group && r.TargetLabel == "node_group")
		}
		if _, labelled := ds.Spec.Template.Labels[deckhousev1.NodeGroupLabel]; !kept || !labelled {
			t.Errorf("%s: the group label %s of the pods should become node_group", mode, deckhousev1.NodeGroupLabel)
		}
	}
}

// sanitize is Prometheus's label-name form of a Kubernetes label key.
func sanitize(key string) string {
	out := []byte(key)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			out[i] = '_'
		}
	}
	return string(out)
}

// TestTheNotArmedAlertNamesTheAgentsUser: the runbook of
// NodeFencingAgentNotArmed tells what /dev/watchdog's owner must be; it is
// the user these DaemonSets run the agent as.
func TestTheNotArmedAlertNamesTheAgentsUser(t *testing.T) {
	data, err := manifests.FS.ReadFile("monitoring/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("stat -c '%%u %%a' /dev/watchdog must print %d 600", deckhousev1.FencingAgentUID)
	if !strings.Contains(string(data), "alert: NodeFencingAgentNotArmed") || !strings.Contains(string(data), want) {
		t.Errorf("prometheus-rules.yaml should have the alert NodeFencingAgentNotArmed, its description saying %q", want)
	}
}
