package clusterapi

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

const ns = deckhousev1.Namespace

func staticGroup(name string, count int32, selector map[string]string) *deckhousev1.NodeGroup {
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}}
	ng.Spec.NodeType = deckhousev1.NodeTypeStatic
	ng.Spec.StaticInstances = &deckhousev1.StaticInstancesSpec{Count: count}
	if selector != nil {
		ng.Spec.StaticInstances.LabelSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return ng
}

func TestWanted(t *testing.T) {
	cloudStatic := staticGroup("a", 1, nil)
	cloudStatic.Spec.NodeType = deckhousev1.NodeTypeCloudStatic
	ephemeral := staticGroup("b", 1, nil)
	ephemeral.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
	without := staticGroup("c", 1, nil)
	without.Spec.StaticInstances = nil
	deleting := staticGroup("d", 1, nil)
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name string
		ng   *deckhousev1.NodeGroup
		want bool
	}{
		{"Static with staticInstances", staticGroup("w", 0, nil), true},
		{"CloudStatic with staticInstances", cloudStatic, true},
		{"CloudEphemeral", ephemeral, false},
		{"no staticInstances", without, false},
		{"being deleted", deleting, false},
		{"gone", nil, false},
	} {
		if got := Wanted(tc.ng); got != tc.want {
			t.Errorf("%s: Wanted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The MachineDeployment is Deckhouse's, in v1beta2 form: named after the
// group, count replicas, bootstrap data from the manual-bootstrap Secret,
// infrastructure from the group's StaticMachineTemplate.
func TestMachineDeployment(t *testing.T) {
	md := MachineDeployment(staticGroup("worker", 2, map[string]string{"role": "worker"}), ns)
	if md.Name != "worker" || md.Namespace != ns || *md.Spec.Replicas != 2 {
		t.Fatalf("MachineDeployment %s/%s replicas %d, want %s/worker replicas 2", md.Namespace, md.Name, *md.Spec.Replicas, ns)
	}
	if md.Spec.ClusterName != infrav1alpha1.StaticClusterName || md.Spec.Template.Spec.ClusterName != infrav1alpha1.StaticClusterName {
		t.Errorf("clusterName %q/%q, want %q", md.Spec.ClusterName, md.Spec.Template.Spec.ClusterName, infrav1alpha1.StaticClusterName)
	}
	if got := md.Spec.Template.Spec.Bootstrap.DataSecretName; got == nil || *got != deckhousev1.ManualBootstrapSecretPrefix+"worker" {
		t.Errorf("bootstrap.dataSecretName = %v, want manual-bootstrap-for-worker", got)
	}
	want := clusterv1.ContractVersionedObjectReference{APIGroup: infrav1alpha1.GroupName, Kind: "StaticMachineTemplate", Name: "worker"}
	if md.Spec.Template.Spec.InfrastructureRef != want {
		t.Errorf("infrastructureRef = %+v, want %+v", md.Spec.Template.Spec.InfrastructureRef, want)
	}
	// Cluster API's admission refuses a selector that does not match the template.
	for k, v := range md.Spec.Selector.MatchLabels {
		if md.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template's labels %v", k, v, md.Spec.Template.Labels)
		}
	}
	// What is applied claims only the fields set here: no zero-valued
	// rollout, deletion or status that would fight Cluster API's defaults.
	body, err := json.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"rollout"`, `"deletion"`, `"status"`, `"remediation"`, `"configRef"`, `"paused"`} {
		if strings.Contains(string(body), field) {
			t.Errorf("the applied MachineDeployment has %s: %s", field, body)
		}
	}
}

func TestMachineTemplateCarriesTheSelector(t *testing.T) {
	ng := staticGroup("worker", 1, map[string]string{"role": "worker"})
	tpl := MachineTemplate(ng, ns)
	if tpl.Name != "worker" || tpl.Spec.Template.Spec.LabelSelector.MatchLabels["role"] != "worker" {
		t.Fatalf("template %s selector %v, want worker with role=worker", tpl.Name, tpl.Spec.Template.Spec.LabelSelector)
	}
	ng.Spec.StaticInstances.LabelSelector.MatchLabels["role"] = "changed"
	if tpl.Spec.Template.Spec.LabelSelector.MatchLabels["role"] != "worker" {
		t.Error("the template shares the group's selector; it must copy it")
	}
	if none := MachineTemplate(staticGroup("any", 1, nil), ns); none.Spec.Template.Spec.LabelSelector != nil {
		t.Errorf("a group without a selector got %v", none.Spec.Template.Spec.LabelSelector)
	}
}

// A change of count or selector makes the objects out of date; Cluster
// API's own additions (its selector label, defaults) do not.
func TestCurrent(t *testing.T) {
	ng := staticGroup("worker", 2, map[string]string{"role": "worker"})
	have := MachineDeployment(ng, ns)
	have.Spec.Selector.MatchLabels[infrav1alpha1.ClusterNameLabel] = infrav1alpha1.StaticClusterName
	have.Spec.Template.Labels[infrav1alpha1.ClusterNameLabel] = infrav1alpha1.StaticClusterName
	have.Spec.Rollout.Strategy.Type = clusterv1.RollingUpdateMachineDeploymentStrategyType
	if !MachineDeploymentCurrent(have, MachineDeployment(ng, ns)) {
		t.Error("a MachineDeployment with Cluster API's defaults is reported out of date")
	}
	ng.Spec.StaticInstances.Count = 1
	if MachineDeploymentCurrent(have, MachineDeployment(ng, ns)) {
		t.Error("count 2 -> 1 is reported current")
	}
	tpl := MachineTemplate(ng, ns)
	if !MachineTemplateCurrent(tpl, MachineTemplate(ng, ns)) {
		t.Error("an unchanged template is reported out of date")
	}
	ng.Spec.StaticInstances.LabelSelector.MatchLabels["role"] = "other"
	if MachineTemplateCurrent(tpl, MachineTemplate(ng, ns)) {
		t.Error("a changed selector is reported current")
	}
}

// The Cluster refers to the StaticCluster and to the externally managed
// StaticControlPlane (without which Cluster API neither drains nor deletes
// Nodes); its Secret carries Cluster API's label and type.
func TestClusterObjects(t *testing.T) {
	c := Cluster(ns)
	if c.Name != infrav1alpha1.StaticClusterName || c.Spec.InfrastructureRef.Kind != "StaticCluster" ||
		c.Spec.ControlPlaneRef.Kind != "StaticControlPlane" || c.Spec.ControlPlaneRef.APIGroup != infrav1alpha1.GroupName {
		t.Errorf("Cluster %s refs %+v %+v", c.Name, c.Spec.InfrastructureRef, c.Spec.ControlPlaneRef)
	}
	if c.Spec.Paused != nil {
		t.Error("the Cluster is paused: Cluster API would not reconcile its Machines")
	}
	s := KubeconfigSecret(ns, []byte("kubeconfig"))
	if s.Name != infrav1alpha1.StaticKubeconfigSecret || s.Type != infrav1alpha1.ClusterSecretType ||
		s.Labels[infrav1alpha1.ClusterNameLabel] != infrav1alpha1.StaticClusterName || string(s.Data[infrav1alpha1.ClusterSecretValueKey]) != "kubeconfig" {
		t.Errorf("kubeconfig Secret %+v", s)
	}
	if KubeconfigSecretCurrent(s, KubeconfigSecret(ns, []byte("other"))) {
		t.Error("a changed kubeconfig is reported current")
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	server := InClusterServer(env(map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}))
	if server != "https://10.96.0.1:443" {
		t.Errorf("in a pod the server is the kubernetes Service's address, got %q (its DNS name needs the cluster's DNS)", server)
	}
	if got := InClusterServer(env(map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"})); got != "https://[fd00::1]:443" {
		t.Errorf("an IPv6 Service address: %q", got)
	}
	if got := InClusterServer(env(nil)); got != inClusterServer {
		t.Errorf("outside a pod the server is the Service's DNS name, got %q", got)
	}
	kc, err := InClusterKubeconfig(server)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), serviceAccountTokenFile) || strings.Contains(string(kc), "token:") || !strings.Contains(string(kc), "server: "+server) {
		t.Errorf("the in-cluster kubeconfig must name the server and point at the token file, not hold a token:\n%s", kc)
	}
}
