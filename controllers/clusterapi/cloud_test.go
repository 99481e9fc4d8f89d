package clusterapi

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/manager"
)

var testCloud = Cloud{Cluster: "cloud", TemplateAPIVersion: "infrastructure.cluster.x-k8s.io/v1beta2", Zones: []string{"z2", "z1"}, UUID: "uuid-1"}

func cloudGroup(name string, minPerZone, maxPerZone int32, zones ...string) *deckhousev1.NodeGroup {
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}}
	ng.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
	ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{
		ClassReference: deckhousev1.ClassReference{Kind: "AWSMachineTemplate", Name: "small"},
		Zones:          zones, MinPerZone: minPerZone, MaxPerZone: maxPerZone,
	}
	return ng
}

func class(spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta2")
	u.SetKind("AWSMachineTemplate")
	u.SetName("small")
	u.SetNamespace(ns)
	u.SetResourceVersion("7")
	return u
}

func TestCloudWantedAndZones(t *testing.T) {
	static := staticGroup("s", 1, nil)
	deleting := cloudGroup("d", 1, 1)
	deleting.DeletionTimestamp = &metav1.Time{}
	bare := cloudGroup("b", 1, 1)
	bare.Spec.CloudInstances = nil
	if CloudWanted(static) || CloudWanted(deleting) || CloudWanted(bare) || CloudWanted(nil) || !CloudWanted(cloudGroup("c", 0, 1)) {
		t.Error("want machines for a CloudEphemeral group with cloudInstances alone, not being deleted")
	}
	if got := testCloud.ZonesOf(cloudGroup("c", 1, 1, "b", "a", "b")); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("a group's own zones: %v, want a, b", got)
	}
	if got := testCloud.ZonesOf(cloudGroup("c", 1, 1)); !slices.Equal(got, []string{"z1", "z2"}) {
		t.Errorf("a group without zones: %v, want the provider's z1, z2", got)
	}
}

// The names follow Deckhouse's: <group>-<8 hex digits of the SHA-256 of the
// cluster's UUID and the zone (and the class's checksum, for templates)>.
func TestCloudNames(t *testing.T) {
	// printf 'uuid-1z1' | sha256sum | cut -c1-8, as Deckhouse's template does.
	if got, want := testCloud.MachineDeploymentName("g", "z1"), "g-911da502"; got != want {
		t.Errorf("MachineDeployment name %q, want %q", got, want)
	}
	other := testCloud
	other.UUID = "uuid-2"
	names := map[string]bool{
		testCloud.MachineDeploymentName("g", "z1"): true, testCloud.MachineDeploymentName("g", "z2"): true,
		other.MachineDeploymentName("g", "z1"):  true,
		testCloud.TemplateName("g", "z1", "c1"): true, testCloud.TemplateName("g", "z1", "c2"): true,
	}
	if len(names) != 5 {
		t.Errorf("names collide across zones, clusters or class contents: %v", names)
	}
}

func TestClassChecksumFollowsTheSpecOnly(t *testing.T) {
	a, err := ClassChecksum(class(map[string]any{"template": map[string]any{"spec": map[string]any{"instanceType": "m5.large", "ami": "x"}}}))
	if err != nil {
		t.Fatal(err)
	}
	moved := class(map[string]any{"template": map[string]any{"spec": map[string]any{"ami": "x", "instanceType": "m5.large"}}})
	moved.SetResourceVersion("8")
	moved.SetLabels(map[string]string{"x": "y"})
	b, _ := ClassChecksum(moved)
	c, _ := ClassChecksum(class(map[string]any{"template": map[string]any{"spec": map[string]any{"instanceType": "m5.xlarge", "ami": "x"}}}))
	if a != b || a == c {
		t.Errorf("checksums: same spec %s / %s, another instance type %s; want equal, then different", a, b, c)
	}
}

func TestClassTemplateCopiesTheSpec(t *testing.T) {
	src := class(map[string]any{"template": map[string]any{"spec": map[string]any{"instanceType": "m5.large"}}})
	sum, _ := ClassChecksum(src)
	cp := testCloud.ClassTemplate(cloudGroup("g", 1, 1), src, "z1", sum, ns)
	if cp.GetName() != testCloud.TemplateName("g", "z1", sum) || cp.GetKind() != "AWSMachineTemplate" || cp.GetResourceVersion() != "" ||
		cp.GetLabels()[deckhousev1.NodeGroupLabel] != "g" || !managed(cp.GetLabels()) || cp.GetAnnotations()[deckhousev1.CloudZoneAnnotation] != "z1" {
		t.Fatalf("copy: %+v", cp.Object)
	}
	it, _, _ := unstructured.NestedString(cp.Object, "spec", "template", "spec", "instanceType")
	unstructured.SetNestedField(src.Object, "changed", "spec", "template", "spec", "instanceType")
	if it != "m5.large" {
		t.Errorf("the copy's instanceType %q, want m5.large", it)
	}
	if again, _, _ := unstructured.NestedString(cp.Object, "spec", "template", "spec", "instanceType"); again != "m5.large" {
		t.Error("the copy shares the class's spec")
	}
}

func TestReplicasStayWithinTheSizes(t *testing.T) {
	fixed, ranged := cloudGroup("f", 2, 2).Spec.CloudInstances, cloudGroup("r", 1, 4).Spec.CloudInstances
	for _, tc := range []struct {
		ci      *deckhousev1.CloudInstancesSpec
		current *int32
		want    int32
	}{
		{fixed, nil, 2}, {fixed, new(int32(5)), 2}, {fixed, new(int32(0)), 2},
		{ranged, nil, 1}, {ranged, new(int32(3)), 3}, {ranged, new(int32(9)), 4}, {ranged, new(int32(0)), 1},
	} {
		if got := Replicas(tc.ci, tc.current); got != tc.want {
			t.Errorf("min %d max %d, current %v: %d, want %d", tc.ci.MinPerZone, tc.ci.MaxPerZone, tc.current, got, tc.want)
		}
	}
}

func TestCloudMachineDeployment(t *testing.T) {
	ng := cloudGroup("g", 1, 3, "z1")
	md := testCloud.CloudMachineDeployment(ng, "z1", "g-tpl", "sum", ns, 2, nil)
	s := md.Spec
	if md.Name != testCloud.MachineDeploymentName("g", "z1") || s.ClusterName != "cloud" || *s.Replicas != 2 ||
		md.Annotations[clusterv1.AutoscalerMinSizeAnnotation] != "1" || md.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] != "3" ||
		md.Annotations[deckhousev1.CloudZoneAnnotation] != "z1" || md.Annotations[deckhousev1.InstanceClassChecksumAnnotation] != "sum" {
		t.Fatalf("MachineDeployment: %+v", md.ObjectMeta)
	}
	ts := s.Template.Spec
	if ts.FailureDomain != "z1" || *ts.Bootstrap.DataSecretName != deckhousev1.BootstrapDataSecretPrefix+"g" ||
		ts.InfrastructureRef != (clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachineTemplate", Name: "g-tpl"}) ||
		*ts.Deletion.NodeDrainTimeoutSeconds != 600 {
		t.Errorf("machine template: %+v", ts)
	}
	if ru := s.Rollout.Strategy.RollingUpdate; s.Rollout.Strategy.Type != clusterv1.RollingUpdateMachineDeploymentStrategyType ||
		*ru.MaxSurge != intstr.FromInt32(1) || *ru.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf("rollout by default: %+v, want surge 1, unavailable 0", s.Rollout)
	}
	ng.Spec.CloudInstances.MaxSurgePerZone, ng.Spec.CloudInstances.MaxUnavailablePerZone = new(int32(2)), new(int32(1))
	ng.Spec.NodeDrainTimeoutSecond = new(int32(30))
	tuned := testCloud.CloudMachineDeployment(ng, "z1", "g-tpl", "sum", ns, 2, nil)
	if ru := tuned.Spec.Rollout.Strategy.RollingUpdate; *ru.MaxSurge != intstr.FromInt32(2) || *ru.MaxUnavailable != intstr.FromInt32(1) ||
		*tuned.Spec.Template.Spec.Deletion.NodeDrainTimeoutSeconds != 30 {
		t.Errorf("the group's surge, unavailability and drain timeout: %+v, %v", ru, *tuned.Spec.Template.Spec.Deletion.NodeDrainTimeoutSeconds)
	}

	if !CloudMachineDeploymentCurrent(md, md) {
		t.Error("a MachineDeployment is not current against itself")
	}
	for what, change := range map[string]func(*clusterv1.MachineDeployment){
		"the class copy": func(m *clusterv1.MachineDeployment) { m.Spec.Template.Spec.InfrastructureRef.Name = "g-new" },
		"the max size":   func(m *clusterv1.MachineDeployment) { m.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] = "5" },
		"the surge": func(m *clusterv1.MachineDeployment) {
			m.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = new(intstr.FromInt32(3))
		},
		"the failure domain": func(m *clusterv1.MachineDeployment) { m.Spec.Template.Spec.FailureDomain = "z9" },
		"a capacity annotation": func(m *clusterv1.MachineDeployment) {
			m.Annotations[deckhousev1.AutoscalerCapacityPrefix+"cpu"] = "4"
		},
	} {
		want := testCloud.CloudMachineDeployment(cloudGroup("g", 1, 3, "z1"), "z1", "g-tpl", "sum", ns, 2, nil)
		change(want)
		if CloudMachineDeploymentCurrent(md, want) {
			t.Errorf("a change of %s is not seen", what)
		}
	}
}

// TestCapacityAnnotationsTellTheAutoscalerWhatANodeWillBe: the labels
// and taints of the group's node template with those node-manager adds,
// in the autoscaler's formats; maxPods when the group sets it; the class's
// own capacity annotations but its labels and taints; and a capacity
// annotation the group no longer has makes the MachineDeployment stale.
func TestCapacityAnnotationsTellTheAutoscalerWhatANodeWillBe(t *testing.T) {
	ng := cloudGroup("g", 0, 3)
	ng.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Labels: map[string]string{"tier": "web"},
		Taints: []deckhousev1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}, {Key: "spot", Effect: "NoExecute"}}}
	ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: new(int32(64))}
	cl := class(map[string]any{})
	cl.SetAnnotations(map[string]string{deckhousev1.AutoscalerCapacityPrefix + "cpu": "4", deckhousev1.AutoscalerCapacityPrefix + "memory": "8Gi",
		deckhousev1.AutoscalerCapacityPrefix + "labels": "from=class", "unrelated": "x"})
	got := CapacityAnnotations(ng, cl)
	want := map[string]string{
		deckhousev1.AutoscalerCapacityPrefix + "cpu":     "4",
		deckhousev1.AutoscalerCapacityPrefix + "memory":  "8Gi",
		deckhousev1.AutoscalerCapacityPrefix + "labels":  deckhousev1.NodeRoleLabelPrefix + "g=," + deckhousev1.NodeGroupLabel + "=g," + deckhousev1.NodeTypeLabel + "=CloudEphemeral,tier=web",
		deckhousev1.AutoscalerCapacityPrefix + "taints":  "dedicated=web:NoSchedule,spot:NoExecute",
		deckhousev1.AutoscalerCapacityPrefix + "maxPods": "64",
	}
	if !maps.Equal(got, want) {
		t.Errorf("capacity annotations:\n got %v\nwant %v", got, want)
	}
	md := testCloud.CloudMachineDeployment(ng, "z1", "g-tpl", "sum", ns, 1, got)
	ng.Spec.NodeTemplate.Taints = nil
	fewer := testCloud.CloudMachineDeployment(ng, "z1", "g-tpl", "sum", ns, 1, CapacityAnnotations(ng, cl))
	if CloudMachineDeploymentCurrent(md, fewer) {
		t.Error("a MachineDeployment with the taints the group dropped is taken for current")
	}
}

// TestPrioritiesListEveryGroupForTheExpander: the expander's configuration
// lists each group's MachineDeployments under its priority (0 when unset),
// highest first, as expressions matching the autoscaler's names of them
// and nothing else.
func TestPrioritiesListEveryGroupForTheExpander(t *testing.T) {
	a, b, c := cloudGroup("a.b", 0, 1), cloudGroup("b", 0, 1), cloudGroup("c", 0, 1)
	a.Spec.CloudInstances.Priority, c.Spec.CloudInstances.Priority = new(int32(10)), new(int32(-1))
	got := Priorities(ns, []*deckhousev1.NodeGroup{c, b, a})
	want := "10:\n  - '^MachineDeployment/d8-cloud-instance-manager/a\\.b-[0-9a-f]{8}$'\n" +
		"0:\n  - '^MachineDeployment/d8-cloud-instance-manager/b-[0-9a-f]{8}$'\n" +
		"-1:\n  - '^MachineDeployment/d8-cloud-instance-manager/c-[0-9a-f]{8}$'\n"
	if got != want {
		t.Fatalf("priorities:\n%s\nwant\n%s", got, want)
	}
	var parsed map[int][]string
	if err := yaml.Unmarshal([]byte(got), &parsed); err != nil || len(parsed) != 3 {
		t.Fatalf("the configuration is not the expander's YAML map of int to expressions: %v %v", parsed, err)
	}
	re := regexp.MustCompile(parsed[10][0])
	for name, match := range map[string]bool{
		"MachineDeployment/" + ns + "/" + testCloud.MachineDeploymentName("a.b", "z1"): true,
		"MachineDeployment/" + ns + "/a.b":                                             false,
		"MachineDeployment/" + ns + "/axb-01234567":                                    false,
		"MachineDeployment/other/" + testCloud.MachineDeploymentName("a.b", "z1"):      false,
		"MachineSet/" + ns + "/" + testCloud.MachineDeploymentName("a.b", "z1"):        false,
	} {
		if re.MatchString(name) != match {
			t.Errorf("%s matches %s: %v, want %v", parsed[10][0], name, !match, match)
		}
	}
}

// TestARenamedMachineDeploymentStopsTheSync: when the cluster's UUID
// changes, every zone's MachineDeployment would get another name; the
// sync refuses rather than replace them all (draining every machine at
// once), and names what to do.
func TestARenamedMachineDeploymentStopsTheSync(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	c := &Controller{d: &manager.Deps{Namespace: ns}, opts: Options{CloudCluster: "cloud"},
		mds: cache.NewGenericLister(indexer, clusterv1.GroupVersion.WithResource("machinedeployments").GroupResource())}
	old := testCloud
	old.UUID = "uuid-0"
	md := &unstructured.Unstructured{}
	md.SetName(old.MachineDeploymentName("g", "z1"))
	md.SetNamespace(ns)
	md.SetLabels(groupLabels("g"))
	md.SetAnnotations(map[string]string{deckhousev1.CloudZoneAnnotation: "z1"})
	if err := indexer.Add(md); err != nil {
		t.Fatal(err)
	}
	if err := c.checkNames("g", old, []string{"z1", "z2"}); err != nil {
		t.Errorf("the same UUID: %v", err)
	}
	if err := c.checkNames("g", testCloud, []string{"z2"}); err != nil {
		t.Errorf("a zone the group no longer has goes as usual: %v", err)
	}
	err := c.checkNames("g", testCloud, []string{"z1", "z2"})
	if err == nil || !strings.Contains(err.Error(), "--cluster-uuid") || !strings.Contains(err.Error(), md.GetName()) {
		t.Errorf("another UUID: %v, want a refusal naming %s and --cluster-uuid", err, md.GetName())
	}
}

// TestCloudSizesAreDeckhouses: min and max are the per-zone sizes times the
// zones (the provider's for a group that names none), desired the sum of
// the group's zone MachineDeployments' replicas, never below min; a
// MachineDeployment being deleted, another group's and a static group's do
// not count; a group without machines here has no sizes.
func TestCloudSizesAreDeckhouses(t *testing.T) {
	mdOf := func(name, group, zone string, replicas int64, deleting bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": replicas}}}
		u.SetName(name)
		u.SetNamespace(ns)
		u.SetLabels(groupLabels(group))
		if zone != "" {
			u.SetAnnotations(map[string]string{deckhousev1.CloudZoneAnnotation: zone})
		}
		if deleting {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		}
		return u
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, md := range []*unstructured.Unstructured{
		mdOf("g-1", "g", "z1", 3, false), mdOf("g-2", "g", "z2", 2, false), mdOf("g-old", "g", "z3", 4, true),
		mdOf("g", "g", "", 7, false), mdOf("h-1", "h", "z1", 1, false),
	} {
		if err := idx.Add(md); err != nil {
			t.Fatal(err)
		}
	}
	s := &CloudSizes{zones: []string{"z1", "z2"}, namespace: ns,
		mds: cache.NewGenericLister(idx, clusterv1.GroupVersion.WithResource("machinedeployments").GroupResource())}
	show := func(ng *deckhousev1.NodeGroup) string {
		d, lo, hi, ok := s.Of(ng)
		return fmt.Sprintf("%d %d %d %v", d, lo, hi, ok)
	}
	for _, c := range []struct {
		ng   *deckhousev1.NodeGroup
		want string
	}{
		{cloudGroup("g", 1, 4), "5 2 8 true"},                    // the provider's two zones
		{cloudGroup("g", 3, 4, "z1", "z2", "z3"), "9 9 12 true"}, // 5 replicas, below min 9
		{cloudGroup("h", 0, 2, "z1"), "1 0 2 true"},
		{cloudGroup("none", 2, 2), "4 4 4 true"}, // no MachineDeployment yet
		{cloudGroup("g", 2, 1), "5 4 4 true"},    // maxPerZone below min counts as min
		{staticGroup("g", 1, nil), "0 0 0 false"},
	} {
		if got := show(c.ng); got != c.want {
			t.Errorf("%s %v: desired min max ok = %s, want %s", c.ng.Name, c.ng.Spec.CloudInstances, got, c.want)
		}
	}
}

// TestCloudMachineHealthCheckReplacesLostMachinesOfTheGroup: the group's
// machines, lost for the given time or not joined in time, replaced while
// at most 40% of them are unhealthy, and at least one.
func TestCloudMachineHealthCheckReplacesLostMachinesOfTheGroup(t *testing.T) {
	for machines, want := range map[int32]int32{0: 1, 1: 1, 2: 1, 3: 1, 5: 2, 10: 4} {
		if got := UnhealthyLimit(machines); got != want {
			t.Errorf("%d machines: %d may be unhealthy at once, want %d", machines, got, want)
		}
	}
	mhc := testCloud.CloudMachineHealthCheck(cloudGroup("g", 1, 1), ns, 5, 600, 1200)
	s := mhc.Spec
	if mhc.Name != "g" || s.ClusterName != "cloud" || s.Selector.MatchLabels[deckhousev1.NodeGroupLabel] != "g" || len(s.Selector.MatchLabels) != 1 ||
		*s.Checks.NodeStartupTimeoutSeconds != 1200 || len(s.Checks.UnhealthyNodeConditions) != 1 ||
		s.Checks.UnhealthyNodeConditions[0].Status != "Unknown" || *s.Checks.UnhealthyNodeConditions[0].TimeoutSeconds != 600 ||
		s.Remediation.TriggerIf.UnhealthyLessThanOrEqualTo.String() != "2" || !managed(mhc.Labels) {
		t.Errorf("MachineHealthCheck: %+v", mhc)
	}
}

// TestAMachineTheHealthCheckFailedIsAFailure: a Machine whose
// HealthCheckSucceeded is False is listed in Deckhouse's shape, with its
// MachineSet as owner; a healthy one or one not checked yet is not.
func TestAMachineTheHealthCheckFailedIsAFailure(t *testing.T) {
	m := machine("g-abc-1", "n", "Running")
	m.Spec.ProviderID = "aws:///i-1"
	m.OwnerReferences = []metav1.OwnerReference{{Kind: "MachineSet", Name: "g-abc"}}
	if f := MachineFailureOf(m); f != nil {
		t.Errorf("a Machine not checked yet: %+v", f)
	}
	at := metav1.NewTime(time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC))
	m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse,
		Reason: "UnhealthyNode", Message: "Condition Ready on Node n is Unknown for more than 10m", LastTransitionTime: at}}
	f := MachineFailureOf(m)
	if f == nil || f.Name != "g-abc-1" || f.ProviderID != "aws:///i-1" || f.OwnerRef != "g-abc" || f.LastOperation == nil ||
		f.LastOperation.State != "Failed" || f.LastOperation.Type != "HealthCheck" || f.LastOperation.LastUpdateTime != "2026-11-29T01:00:00Z" ||
		!strings.HasPrefix(f.LastOperation.Description, "UnhealthyNode: Condition Ready") {
		t.Errorf("failure %+v", f)
	}
	m.Status.Conditions[0].Status = metav1.ConditionTrue
	if f := MachineFailureOf(m); f != nil {
		t.Errorf("a healthy Machine: %+v", f)
	}
}
