package templates

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// deckhouseContext is the context of a group, built as the server builds
// it, from a NodeGroup and a cluster configuration.
func deckhouseContext(t *testing.T, clusterConfiguration string, ng *deckhousev1.NodeGroup) map[string]any {
	t.Helper()
	settings, err := ParseClusterConfiguration([]byte(clusterConfiguration))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := NewContext(ng, settings, []string{"10.0.0.1:6443"}, testCA)
	if err != nil {
		t.Fatal(err)
	}
	values, err := ctx.Values()
	if err != nil {
		t.Fatal(err)
	}
	return values
}

func staticGroup(name string) *deckhousev1.NodeGroup {
	return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
}

// TestDeckhouseStepsSeeDeckhousePresence: the templates Deckhouse users write
// render as under Deckhouse, for each field in both states of its feature:
// a key that Deckhouse leaves out when its feature is off tests false here.
func TestDeckhouseStepsSeeDeckhousePresence(t *testing.T) {
	const proxy = "proxy: {httpProxy: 'http://proxy.corp:3128', noProxy: ['.corp']}"
	ephemeral := staticGroup("cloud")
	ephemeral.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
	ephemeral.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "worker"}}
	fenced := staticGroup("fenced")
	fenced.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog, Watchdog: &deckhousev1.WatchdogSpec{Timeout: "2m"}}
	notified := staticGroup("notified")
	notified.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeNotify}
	v2 := staticGroup("v2")
	v2.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerdV2}
	v2.Spec.KubernetesVersion = "1.35"

	cases := []struct {
		name, cluster string
		group         *deckhousev1.NodeGroup
		template      string
		want          string
	}{
		{"no proxy: if .proxy is false", "", staticGroup("worker"), `{{ if .proxy }}proxy{{ else }}direct{{ end }}`, "direct"},
		{"no proxy: with .proxy is skipped", "", staticGroup("worker"), `{{ with .proxy }}{{ .httpProxy }}{{ end }}`, ""},
		{"no proxy: hasKey is false", "", staticGroup("worker"), `{{ if hasKey . "proxy" }}proxy{{ else }}direct{{ end }}`, "direct"},
		{"a proxy: hasKey is true", proxy, staticGroup("worker"), `{{ if hasKey . "proxy" }}proxy{{ end }}`, "proxy"},
		{"no StaticClusterConfiguration: Deckhouse's hasKey guard on static", "", staticGroup("worker"),
			`{{ if hasKey .nodeGroup "static" }}{{ .nodeGroup.static.internalNetworkCIDRs | join "," }}{{ else }}none{{ end }}`, "none"},
		{"no fencing: hasKey is false", "", staticGroup("worker"), `{{ if hasKey .nodeGroup "fencing" }}fenced{{ else }}none{{ end }}`, "none"},
		{"fencing: hasKey is true", "", fenced, `{{ if hasKey .nodeGroup "fencing" }}fenced{{ end }}`, "fenced"},
		{"a proxy: if .proxy is true", proxy, staticGroup("worker"), `{{ if .proxy }}{{ .proxy.httpProxy }}{{ end }}`, "http://proxy.corp:3128"},
		{"a proxy: Deckhouse's profile-proxy guard", proxy, staticGroup("worker"),
			`{{ if .proxy }}{{ if .proxy.httpsProxy }}https{{ end }}{{ if .proxy.noProxy }}{{ .proxy.noProxy | join "," }}{{ end }}{{ end }}`,
			"127.0.0.1,169.254.169.254,cluster.local,10.111.0.0/16,10.222.0.0/16,.corp"},
		{"nodeGroup.name", "", staticGroup("worker"), `{{ .nodeGroup.name }}`, "worker"},
		{"nodeGroup.nodeType", "", staticGroup("worker"), `{{ .nodeGroup.nodeType }}`, "Static"},
		{"runType is Normal", "", staticGroup("worker"), `{{ if eq .runType "Normal" }}normal{{ end }}`, "normal"},
		{"cri is a string", "", staticGroup("worker"), `{{ if eq .cri "Containerd" }}containerd{{ end }}`, "containerd"},
		{"cri of a ContainerdV2 group", "", v2, `{{ .cri }} {{ .nodeGroup.cri.type }}`, "ContainerdV2 ContainerdV2"},
		{"kubernetesVersion is the group's minor", "", v2, `{{ .kubernetesVersion }} {{ .nodeGroup.kubernetesVersion }}`, "1.35 1.35"},
		{"kubernetesVersion compares with semverCompare", "", staticGroup("worker"), `{{ if semverCompare ">=1.30" .kubernetesVersion }}new{{ end }}`, "new"},
		{"no cloudInstances on a Static group", "", staticGroup("worker"), `{{ if .nodeGroup.cloudInstances }}cloud{{ else }}static{{ end }}`, "static"},
		{"cloudInstances on a CloudEphemeral group", "", ephemeral, `{{ if .nodeGroup.cloudInstances }}{{ .nodeGroup.cloudInstances.classReference.kind }}{{ end }}`, "OpenStackInstanceClass"},
		{"no fencing", "", staticGroup("worker"), `{{ if .nodeGroup.fencing }}fenced{{ else }}none{{ end }}`, "none"},
		{"fencing", "", fenced, `{{ if .nodeGroup.fencing }}{{ .nodeGroup.fencing.watchdogTimeout }}{{ end }}`, "2m"},
		{"fencing: Deckhouse's mode", "", fenced, `{{ if and .nodeGroup.fencing (eq .nodeGroup.fencing.mode "Watchdog") }}watchdog{{ end }}`, "watchdog"},
		{"fencing: the timeout in seconds", "", fenced, `{{ .nodeGroup.fencing.watchdogTimeoutSeconds }}`, "120"},
		{"fencing in Notify mode", "", notified, `{{ .nodeGroup.fencing.mode }} {{ .nodeGroup.fencing.watchdogTimeout }}`, "Notify 60s"},
		{"no fencing: and stops before the mode", "", staticGroup("worker"), `{{ if and .nodeGroup.fencing (eq .nodeGroup.fencing.mode "Watchdog") }}watchdog{{ else }}none{{ end }}`, "none"},
		{"no packages proxy", "", staticGroup("worker"), `{{ if .packagesProxy }}{{ .packagesProxy.addresses | join "," }}{{ else }}none{{ end }}`, "none"},
		{"no cloud provider", "", staticGroup("worker"), `{{ if .cloudProvider }}{{ .cloudProvider.type }}{{ else }}none{{ end }}`, "none"},
		{"never a cluster bootstrap", "", staticGroup("worker"), `{{ if .clusterBootstrap }}bootstrap{{ else }}none{{ end }}`, "none"},
		{"no images", "", staticGroup("worker"), `{{ with .images }}images{{ end }}`, ""},
		{"no bundle", "", staticGroup("worker"), `{{ if .bundle }}{{ .bundle }}{{ else }}any{{ end }}`, "any"},
		{"nodeUsers ranges over nothing", "", staticGroup("worker"), `{{- range .nodeUsers }}echo 'Tuning environment for user {{ .name }}'{{- end }}`, ""},
		{"nodeUsers is a list", "", staticGroup("worker"), `{{ len .nodeUsers }}`, "0"},
		{"clusterDomain in normal", "", staticGroup("worker"), `{{ .normal.clusterDomain }} {{ .normal.clusterDNSAddress }}`, "cluster.local 10.222.0.10"},
		{"apiserverEndpoints", "", staticGroup("worker"), `{{ range .normal.apiserverEndpoints }}{{ . }}{{ end }}`, "10.0.0.1:6443"},
		{"nodeTemplate labels", "", staticGroup("worker"), `{{ range $k, $v := .nodeGroup.nodeTemplate.labels }}{{ $k }}{{ end }}none`, "none"},
		{"disruptions.approvalMode", "", staticGroup("worker"), `{{ .nodeGroup.disruptions.approvalMode }}`, "Automatic"},
		{"kubelet.containerLogMaxSize", "", staticGroup("worker"), `{{ .nodeGroup.kubelet.containerLogMaxSize }}`, "50Mi"},
	}
	engine, err := NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := engine.Render("NodeGroupConfiguration/test.sh", c.template, deckhouseContext(t, c.cluster, c.group))
			if err != nil {
				t.Fatalf("render %s: %v", c.template, err)
			}
			if got != c.want {
				t.Errorf("%s rendered %q, want %q", c.template, got, c.want)
			}
		})
	}
}

// TestFieldsOfAnAbsentKeyAreRenderErrors: reading a field of a key whose
// feature is off fails the render naming the field, where Deckhouse would
// write "<no value>" into the script.
func TestFieldsOfAnAbsentKeyAreRenderErrors(t *testing.T) {
	engine, err := NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	values := deckhouseContext(t, "", staticGroup("worker"))
	for _, field := range []string{"proxy.httpProxy", "nodeGroup.cloudInstances.classReference", "nodeGroup.fencing.watchdogTimeout", "packagesProxy.token", "registry.address"} {
		_, err := engine.Render("NodeGroupConfiguration/test.sh", "{{ ."+field+" }}", values)
		last := field[strings.LastIndex(field, ".")+1:]
		if err == nil || !strings.Contains(err.Error(), last) {
			t.Errorf("{{ .%s }} without the feature: want a render error naming %s, got %v", field, last, err)
		}
	}
}
