package status

import (
	"bytes"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
)

// inertCases are NodeGroup specs as the API stores them (CRD defaults
// applied) and the paths InertFields must report for each.
var inertCases = []struct {
	name string
	spec deckhousev1.NodeGroupSpec
	want []string
}{
	{"a bare Static group", deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}, nil},
	{"everything node-manager acts on", deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeStatic, KubernetesVersion: "1.36",
		CRI:         &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerd, Containerd: &deckhousev1.ContainerdSpec{MaxConcurrentDownloads: ptr.To[int32](3)}},
		Kubelet:     &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](110), RootDir: "/var/lib/kubelet"},
		Disruptions: &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalAutomatic, Automatic: &deckhousev1.AutomaticDisruptions{DrainBeforeApproval: ptr.To(true)}},
		Update:      &deckhousev1.UpdateSpec{MaxConcurrent: ptr.To(intstr.FromInt32(1))},
		NodeTemplate: &deckhousev1.NodeTemplate{Labels: map[string]string{"node-role.deckhouse.io/system": ""},
			Taints: []deckhousev1.Taint{{Key: "dedicated.deckhouse.io", Value: "system", Effect: "NoExecute"}}},
		Chaos:                  &deckhousev1.ChaosSpec{Mode: "Disabled", Period: "6h"},
		NodeDrainTimeoutSecond: ptr.To[int32](600),
	}, nil},
	{"chaos, manageKernel and staticInstances on a Static group; fencing is acted on", deckhousev1.NodeGroupSpec{
		NodeType:        deckhousev1.NodeTypeStatic,
		Chaos:           &deckhousev1.ChaosSpec{Mode: deckhousev1.ChaosModeDrainAndDelete, Period: "6h"},
		OperatingSystem: &deckhousev1.OperatingSystemSpec{ManageKernel: ptr.To(false)},
		StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 2},
		Fencing:         &deckhousev1.FencingSpec{Mode: "Watchdog", Watchdog: &deckhousev1.WatchdogSpec{Timeout: "60s"}},
	}, []string{"spec.chaos.mode", "spec.operatingSystem.manageKernel", "spec.staticInstances"}},
	{"chaos on a group joined by hand", deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeStatic,
		Chaos:    &deckhousev1.ChaosSpec{Mode: deckhousev1.ChaosModeDrainAndDelete, Period: "1h"},
	}, []string{"spec.chaos.mode"}},
	{"Deckhouse's GPU sharing on a Static group", deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeStatic,
		GPU:      &deckhousev1.GPUSpec{Sharing: deckhousev1.GPUSharingTimeSlicing, TimeSlicing: &deckhousev1.GPUTimeSlicing{PartitionCount: ptr.To[int32](4)}},
	}, []string{"spec.gpu"}},
	{"a CloudEphemeral group with the CRD's defaults", deckhousev1.NodeGroupSpec{
		NodeType:    deckhousev1.NodeTypeCloudEphemeral,
		Disruptions: &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalRollingUpdate},
		CloudInstances: &deckhousev1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "small"},
			Zones: []string{"a", "b"}, MinPerZone: 1, MaxPerZone: 3, MaxSurgePerZone: ptr.To[int32](1), MaxUnavailablePerZone: ptr.To[int32](0)},
	}, []string{"spec.cloudInstances.classReference"}},
	{"a CloudEphemeral group with every machine setting", deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeCloudEphemeral,
		CloudInstances: &deckhousev1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "AWSInstanceClass", Name: "big"},
			MinPerZone: 0, MaxPerZone: 10, MaxSurgePerZone: ptr.To[int32](2), MaxUnavailablePerZone: ptr.To[int32](1),
			Standby: ptr.To(intstr.FromString("10%")), StandbyHolder: &deckhousev1.StandbyHolderSpec{OverprovisioningRate: ptr.To[int32](50)},
			Priority: ptr.To[int32](5)},
	}, []string{"spec.cloudInstances.classReference", "spec.cloudInstances.maxSurgePerZone", "spec.cloudInstances.maxUnavailablePerZone",
		"spec.cloudInstances.standby", "spec.cloudInstances.standbyHolder", "spec.cloudInstances.priority"}},
	{"Deckhouse's deprecated fields, as its stored groups carry them", deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeCloudEphemeral,
		CRI: &deckhousev1.CRISpec{Type: deckhousev1.CRIDocker,
			Docker: &deckhousev1.DockerSpec{MaxConcurrentDownloads: ptr.To[int32](10), Manage: ptr.To(true)}},
		CloudInstances: &deckhousev1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "AWSInstanceClass", Name: "big"},
			MaxPerZone: 1, QuickShutdown: ptr.To(true),
			StandbyHolder: &deckhousev1.StandbyHolderSpec{NotHeldResources: &deckhousev1.NotHeldResources{
				CPU: ptr.To(intstr.FromString("1500m")), Memory: ptr.To(intstr.FromString("1Gi"))}}},
	}, []string{"spec.cri.type", "spec.cri.docker", "spec.cloudInstances.classReference", "spec.cloudInstances.standbyHolder",
		"spec.cloudInstances.standbyHolder.notHeldResources", "spec.cloudInstances.quickShutdown"}},
	{"leftover Docker settings beside containerd", deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeStatic,
		CRI:      &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerd, Docker: &deckhousev1.DockerSpec{Manage: ptr.To(false)}},
	}, []string{"spec.cri.docker"}},
}

// TestInertFieldsNameTheFieldsNothingActsOn: each case's fields without
// Cluster API; with it (--cluster-api, as the release runs) staticInstances
// is acted on and never listed, and with a cloud's provider too
// (--cloud-cluster) cloudInstances' class, rollout limits, priority and
// standby.
func TestInertFieldsNameTheFieldsNothingActsOn(t *testing.T) {
	cloud := []string{"spec.cloudInstances.classReference", "spec.cloudInstances.maxSurgePerZone", "spec.cloudInstances.maxUnavailablePerZone",
		"spec.cloudInstances.priority", "spec.cloudInstances.standby", "spec.cloudInstances.standbyHolder"}
	for _, tc := range inertCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []Components{{}, {ClusterAPI: true}, {ClusterAPI: true, CloudMachines: true}} {
				want := tc.want
				if c.ClusterAPI {
					// Cluster API makes the group's machines: chaos acts on them.
					want = slices.DeleteFunc(slices.Clone(want), func(p string) bool {
						return p == "spec.staticInstances" || p == "spec.chaos.mode" && tc.spec.StaticInstances != nil
					})
				}
				if c.CloudMachines {
					want = slices.DeleteFunc(slices.Clone(want), func(p string) bool { return slices.Contains(cloud, p) })
				}
				var got []string
				for _, f := range InertFields(&tc.spec, c) {
					if f.Why == "" {
						t.Errorf("%s has no reason", f.Path)
					}
					got = append(got, f.Path)
				}
				if !slices.Equal(got, want) {
					t.Errorf("InertFields with %+v = %v, want %v", c, got, want)
				}
			}
		})
	}
}

func TestInertFieldsConditionListsEachFieldAndWhy(t *testing.T) {
	g := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w", Generation: 3}, Spec: deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeStatic, Chaos: &deckhousev1.ChaosSpec{Mode: deckhousev1.ChaosModeDrainAndDelete}, StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 1},
	}}
	c := meta.FindStatusCondition(Compute(g, "", nil, Components{}, t0).Conditions, ConditionInertFields)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "FieldsHaveNoEffect" || c.ObservedGeneration != 3 {
		t.Fatalf("InertFields condition = %+v, want True, FieldsHaveNoEffect, generation 3", c)
	}
	for _, want := range []string{"spec.chaos.mode (chaos deletes only machines Cluster API makes", "spec.staticInstances (node-manager-controller runs without --cluster-api"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q should contain %q", c.Message, want)
		}
	}
	// With Cluster API (the release) staticInstances is acted on, and chaos
	// with it.
	c = meta.FindStatusCondition(Compute(g, "", nil, Components{ClusterAPI: true}, t0).Conditions, ConditionInertFields)
	if c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("with --cluster-api the InertFields condition = %+v, want False", c)
	}
	// Without staticInstances, chaos has no machine to delete.
	byHand := g.DeepCopy()
	byHand.Spec.StaticInstances = nil
	c = meta.FindStatusCondition(Compute(byHand, "", nil, Components{ClusterAPI: true}, t0).Conditions, ConditionInertFields)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "spec.chaos.mode") {
		t.Fatalf("a group joined by hand with chaos: the InertFields condition = %+v, want True for chaos.mode", c)
	}

	g.Spec.Chaos, g.Spec.StaticInstances = nil, nil
	c = meta.FindStatusCondition(Compute(g, "", nil, Components{}, t0).Conditions, ConditionInertFields)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "AllFieldsActedOn" {
		t.Fatalf("with no inert field the condition = %+v, want False, AllFieldsActedOn", c)
	}
}

// TestInertFieldsAgreeWithTheAdmissionPolicy evaluates the validations of
// manifests/policies/nodegroup-inert-fields.yaml against every case, as
// kube-apiserver would against the stored object, and requires the
// warnings to be exactly InertFields' fields, each "<path>: <why>", for the
// components the shipped node-manager-controller Deployment runs (its
// --cluster-api). Every validation must fire in some case, so a field
// added to one side only is caught.
func TestInertFieldsAgreeWithTheAdmissionPolicy(t *testing.T) {
	policy := readInertPolicy(t)
	shipped := shippedComponents(t)
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	var programs []cel.Program
	for _, v := range policy.Spec.Validations {
		ast, iss := env.Compile(v.Expression)
		if iss.Err() != nil {
			t.Fatalf("compile %q: %v", v.Expression, iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		programs = append(programs, p)
	}
	fired := make([]bool, len(programs))
	for _, tc := range inertCases {
		t.Run(tc.name, func(t *testing.T) {
			ng := &deckhousev1.NodeGroup{TypeMeta: metav1.TypeMeta{APIVersion: "deckhouse.io/v1", Kind: "NodeGroup"},
				ObjectMeta: metav1.ObjectMeta{Name: "g"}, Spec: tc.spec}
			object, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ng)
			if err != nil {
				t.Fatal(err)
			}
			var warned []string
			for i, p := range programs {
				out, _, err := p.Eval(map[string]any{"object": object})
				if err != nil {
					t.Fatalf("evaluate %q: %v", policy.Spec.Validations[i].Expression, err)
				}
				if out.Value() == false {
					fired[i] = true
					warned = append(warned, strings.TrimSpace(policy.Spec.Validations[i].Message))
				}
			}
			var want []string
			for _, f := range InertFields(&tc.spec, shipped) {
				want = append(want, f.Path+": "+f.Why)
			}
			slices.Sort(warned)
			slices.Sort(want)
			if !slices.Equal(warned, want) {
				t.Errorf("the policy warns\n  %s\nthe condition lists\n  %s", strings.Join(warned, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
	for i, ok := range fired {
		if !ok {
			t.Errorf("no case makes the policy warn %q: add one to inertCases", policy.Spec.Validations[i].Message)
		}
	}
}

func readInertPolicy(t *testing.T) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	data, err := manifests.FS.ReadFile("policies/nodegroup-inert-fields.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil || tm.Kind != "ValidatingAdmissionPolicy" {
			continue
		}
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.UnmarshalStrict(doc, &p); err != nil {
			t.Fatalf("nodegroup-inert-fields.yaml: %v", err)
		}
		return &p
	}
	t.Fatal("nodegroup-inert-fields.yaml has no ValidatingAdmissionPolicy")
	return nil
}

// shippedComponents are the Components of the shipped
// node-manager-controller Deployment (manifests/node-manager-controller):
// ClusterAPI when it passes --cluster-api.
func shippedComponents(t *testing.T) Components {
	t.Helper()
	path := path.Join(deckhousev1.NodeManagerControllerName, "deployment.yaml")
	data, err := manifests.FS.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var d appsv1.Deployment
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d.Kind != "Deployment" || d.Name != deckhousev1.NodeManagerControllerName {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == deckhousev1.NodeManagerControllerName {
				return Components{ClusterAPI: slices.Contains(c.Args, "--cluster-api") || slices.Contains(c.Args, "--cluster-api=true")}
			}
		}
	}
	t.Fatalf("%s has no %s Deployment and container", path, deckhousev1.NodeManagerControllerName)
	return Components{}
}
