package foundation

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/generated/informers/externalversions"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

var (
	nodeGroupsGVR = schema.GroupVersionResource{Group: "deckhouse.io", Version: "v1", Resource: "nodegroups"}
	ngcGVR        = schema.GroupVersionResource{Group: "deckhouse.io", Version: "v1alpha1", Resource: "nodegroupconfigurations"}
)

type obj = map[string]any

func object(apiVersion, kind, name string, spec obj) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: obj{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": obj{"name": name},
		"spec":     spec,
	}}
}

func nodeGroup(name string, spec obj) *unstructured.Unstructured {
	return object("deckhouse.io/v1", "NodeGroup", name, spec)
}

func ngc(name string, spec obj) *unstructured.Unstructured {
	return object("deckhouse.io/v1alpha1", "NodeGroupConfiguration", name, spec)
}

// TestInvalidObjectsAreRejected sends invalid NodeGroups and
// NodeGroupConfigurations to kube-apiserver and checks that each is refused
// as Invalid with a message that names the offending field.
func TestInvalidObjectsAreRejected(t *testing.T) {
	cloudInstances := obj{"classReference": obj{"kind": "OpenStackInstanceClass", "name": "small"}, "minPerZone": 1, "maxPerZone": 3}
	cases := []struct {
		name      string
		gvr       schema.GroupVersionResource
		object    *unstructured.Unstructured
		wantField string
	}{
		{"unknown nodeType", nodeGroupsGVR, nodeGroup("bad-type", obj{"nodeType": "Cloud"}), "spec.nodeType"},
		{"missing nodeType", nodeGroupsGVR, nodeGroup("no-type", obj{}), "spec.nodeType"},
		{"name over 42 characters", nodeGroupsGVR, nodeGroup(strings.Repeat("a", 43), obj{"nodeType": "Static"}), "metadata.name"},
		{"uppercase name", nodeGroupsGVR, nodeGroup("Worker", obj{"nodeType": "Static"}), "metadata.name"},
		{"dotted name", nodeGroupsGVR, nodeGroup("front.end", obj{"nodeType": "Static"}), "metadata.name"},
		{"cloudInstances on Static", nodeGroupsGVR, nodeGroup("static-cloud", obj{"nodeType": "Static", "cloudInstances": cloudInstances}), "spec.cloudInstances"},
		{"cloudInstances on CloudPermanent", nodeGroupsGVR, nodeGroup("perm-cloud", obj{"nodeType": "CloudPermanent", "cloudInstances": cloudInstances}), "spec.cloudInstances"},
		{"CloudEphemeral without cloudInstances", nodeGroupsGVR, nodeGroup("eph", obj{"nodeType": "CloudEphemeral"}), "spec.cloudInstances"},
		{"staticInstances on CloudEphemeral", nodeGroupsGVR, nodeGroup("eph-static", obj{"nodeType": "CloudEphemeral", "cloudInstances": cloudInstances, "staticInstances": obj{"count": 1}}), "spec.staticInstances"},
		{"maxPerZone below minPerZone", nodeGroupsGVR, nodeGroup("eph-zones", obj{"nodeType": "CloudEphemeral", "cloudInstances": obj{"classReference": obj{"kind": "K", "name": "n"}, "minPerZone": 3, "maxPerZone": 1}}), "spec.cloudInstances.maxPerZone"},
		{`maxConcurrent "0"`, nodeGroupsGVR, nodeGroup("mc-zero", obj{"nodeType": "Static", "update": obj{"maxConcurrent": "0"}}), "spec.update.maxConcurrent"},
		{`maxConcurrent "abc"`, nodeGroupsGVR, nodeGroup("mc-abc", obj{"nodeType": "Static", "update": obj{"maxConcurrent": "abc"}}), "spec.update.maxConcurrent"},
		{"maxConcurrent 0", nodeGroupsGVR, nodeGroup("mc-int-zero", obj{"nodeType": "Static", "update": obj{"maxConcurrent": 0}}), "spec.update.maxConcurrent"},
		{`maxConcurrent "150%"`, nodeGroupsGVR, nodeGroup("mc-150", obj{"nodeType": "Static", "update": obj{"maxConcurrent": "150%"}}), "spec.update.maxConcurrent"},
		{"canaries -1", nodeGroupsGVR, nodeGroup("canary-neg", obj{"nodeType": "Static", "update": obj{"canaries": -1}}), "spec.update.canaries"},
		{`soakTime "soon"`, nodeGroupsGVR, nodeGroup("soak-word", obj{"nodeType": "Static", "update": obj{"soakTime": "soon"}}), "spec.update.soakTime"},
		{`soakTime "0s"`, nodeGroupsGVR, nodeGroup("soak-zero", obj{"nodeType": "Static", "update": obj{"soakTime": "0s"}}), "spec.update.soakTime"},
		{`soakTime "25h"`, nodeGroupsGVR, nodeGroup("soak-long", obj{"nodeType": "Static", "update": obj{"soakTime": "25h"}}), "spec.update.soakTime"},
		{"window 25:00", nodeGroupsGVR, nodeGroup("win", obj{"nodeType": "Static", "disruptions": obj{"approvalMode": "Automatic", "automatic": obj{"windows": []any{obj{"from": "25:00", "to": "03:00"}}}}}), "spec.disruptions.automatic.windows[0].from"},
		{"window day Funday", nodeGroupsGVR, nodeGroup("win-day", obj{"nodeType": "Static", "disruptions": obj{"approvalMode": "Automatic", "automatic": obj{"windows": []any{obj{"from": "01:00", "to": "03:00", "days": []any{"Funday"}}}}}}), "spec.disruptions.automatic.windows[0].days[0]"},
		{"approvalMode Sometimes", nodeGroupsGVR, nodeGroup("mode", obj{"nodeType": "Static", "disruptions": obj{"approvalMode": "Sometimes"}}), "spec.disruptions.approvalMode"},
		{"drainTimeoutPolicy Never", nodeGroupsGVR, nodeGroup("drain-policy", obj{"nodeType": "Static", "disruptions": obj{"approvalMode": "Automatic", "automatic": obj{"drainTimeoutPolicy": "Never"}}}), "spec.disruptions.automatic.drainTimeoutPolicy"},
		{"automatic settings in Manual mode", nodeGroupsGVR, nodeGroup("mode-mix", obj{"nodeType": "Static", "disruptions": obj{"approvalMode": "Manual", "automatic": obj{"drainBeforeApproval": false}}}), "spec.disruptions.automatic"},
		{"taint with a bad effect", nodeGroupsGVR, nodeGroup("taint", obj{"nodeType": "Static", "nodeTemplate": obj{"taints": []any{obj{"key": "dedicated", "effect": "NoWay"}}}}), "spec.nodeTemplate.taints[0].effect"},
		{"template label node.deckhouse.io/group (it would move nodes between groups)", nodeGroupsGVR, nodeGroup("label", obj{"nodeType": "Static", "nodeTemplate": obj{"labels": obj{deckhousev1.NodeGroupLabel: "x"}}}), "spec.nodeTemplate.labels"},
		{"template label node-manager.deckhouse.io/fencing-enabled", nodeGroupsGVR, nodeGroup("fence-label", obj{"nodeType": "Static", "nodeTemplate": obj{"labels": obj{deckhousev1.FencingEnabledLabel: ""}}}), "spec.nodeTemplate.labels"},
		{"template annotation update.node.deckhouse.io/approved (it would approve every update)", nodeGroupsGVR, nodeGroup("approve-all", obj{"nodeType": "Static", "nodeTemplate": obj{"annotations": obj{deckhousev1.ApprovedAnnotation: ""}}}), "spec.nodeTemplate.annotations"},
		{"negative nodeDrainTimeoutSecond", nodeGroupsGVR, nodeGroup("drain", obj{"nodeType": "Static", "nodeDrainTimeoutSecond": -5}), "spec.nodeDrainTimeoutSecond"},
		{"cri.containerd with type NotManaged", nodeGroupsGVR, nodeGroup("cri", obj{"nodeType": "Static", "cri": obj{"type": "NotManaged", "containerd": obj{"maxConcurrentDownloads": 3}}}), "spec.cri.containerd"},
		{"unknown cri.type", nodeGroupsGVR, nodeGroup("cri-type", obj{"nodeType": "Static", "cri": obj{"type": "Podman"}}), "spec.cri.type"},
		{"Static reservation without amounts", nodeGroupsGVR, nodeGroup("reserve", obj{"nodeType": "Static", "kubelet": obj{"resourceReservation": obj{"mode": "Static"}}}), "spec.kubelet.resourceReservation.static"},
		{"rootDir /var (the static cleanup removes it)", nodeGroupsGVR, nodeGroup("rootdir", obj{"nodeType": "Static", "kubelet": obj{"rootDir": "/var"}}), "spec.kubelet.rootDir"},
		{"rootDir with a quote", nodeGroupsGVR, nodeGroup("rootdir", obj{"nodeType": "Static", "kubelet": obj{"rootDir": "/data/kube'let"}}), "spec.kubelet.rootDir"},
		{"containerLogMaxFiles 21", nodeGroupsGVR, nodeGroup("logs", obj{"nodeType": "Static", "kubelet": obj{"containerLogMaxFiles": 21}}), "spec.kubelet.containerLogMaxFiles"},
		{"swappiness 101", nodeGroupsGVR, nodeGroup("swap", obj{"nodeType": "Static", "kubelet": obj{"memorySwap": obj{"swapBehavior": "LimitedSwap", "swappiness": 101}}}), "spec.kubelet.memorySwap.swappiness"},
		{"fencing mode Reboot", nodeGroupsGVR, nodeGroup("fence", obj{"nodeType": "Static", "fencing": obj{"mode": "Reboot"}}), "spec.fencing.mode"},
		{"kubernetesVersion v1.36", nodeGroupsGVR, nodeGroup("kver", obj{"nodeType": "Static", "kubernetesVersion": "v1.36"}), "spec.kubernetesVersion"},
		{"NGC without content", ngcGVR, ngc("empty.sh", obj{"content": ""}), "spec.content"},
		{"NGC with a bad node group name", ngcGVR, ngc("bad-group.sh", obj{"content": "true", "nodeGroups": []any{"Workers"}}), "spec.nodeGroups[0]"},
		{"NGC with a negative weight", ngcGVR, ngc("weight.sh", obj{"content": "true", "weight": -1}), "spec.weight"},
	}
	if len(cases) < 12 {
		t.Fatalf("the issue asks for at least 12 invalid objects, have %d", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dyn.Resource(tc.gvr).Create(framework.Context(t), tc.object, metav1.CreateOptions{})
			if err == nil {
				_ = dyn.Resource(tc.gvr).Delete(framework.Context(t), tc.object.GetName(), metav1.DeleteOptions{})
				t.Fatalf("kube-apiserver accepted an invalid %s", tc.object.GetKind())
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("the error should name %s: %v", tc.wantField, err)
			}
		})
	}
}

// TestDeckhouseDedicatedNodeGroupsAreAccepted applies, with kubectl (strict
// field validation), the NodeGroups Deckhouse's documentation publishes for
// dedicated nodes: their node-role.deckhouse.io labels and
// dedicated.deckhouse.io taints are stored as written.
func TestDeckhouseDedicatedNodeGroupsAreAccepted(t *testing.T) {
	ctx := framework.Context(t)
	t.Cleanup(func() {
		for _, name := range []string{"system", "frontend"} {
			_ = f.NM.DeckhouseV1().NodeGroups().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	f.Kubectl(t, "apply", "-f", filepath.Join("testdata", "deckhouse-dedicated-nodegroups.yaml"))
	for _, role := range []string{"system", "frontend"} {
		name := role
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := ng.Spec.NodeTemplate.Labels["node-role.deckhouse.io/"+role]; !ok || v != "" {
			t.Errorf("NodeGroup %s labels = %v, want node-role.deckhouse.io/%s: \"\"", name, ng.Spec.NodeTemplate.Labels, role)
		}
		want := deckhousev1.Taint{Key: "dedicated.deckhouse.io", Value: role, Effect: "NoExecute"}
		if len(ng.Spec.NodeTemplate.Taints) != 1 || ng.Spec.NodeTemplate.Taints[0] != want {
			t.Errorf("NodeGroup %s taints = %v, want [%v]", name, ng.Spec.NodeTemplate.Taints, want)
		}
	}
}

// TestUnknownFieldsAreRefusedUnderStrictValidation: a typo must not be
// silently pruned when the client asks for strict validation (kubectl does).
func TestUnknownFieldsAreRefusedUnderStrictValidation(t *testing.T) {
	ng := nodeGroup("typo", obj{"nodeType": "Static", "nodeTempalte": obj{}})
	_, err := dyn.Resource(nodeGroupsGVR).Create(framework.Context(t), ng, metav1.CreateOptions{FieldValidation: "Strict"})
	if err == nil || !strings.Contains(err.Error(), "nodeTempalte") {
		t.Fatalf("want the unknown field named in the error, got %v", err)
	}
}

func TestStaticInstancesSelectorCanBeAddedButNotChanged(t *testing.T) {
	ctx := framework.Context(t)
	ngs := f.NM.DeckhouseV1().NodeGroups()
	ng := &deckhousev1.NodeGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "caps"},
		Spec:       deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 1}},
	}
	created, err := ngs.Create(ctx, ng, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ngs.Delete(context.Background(), "caps", metav1.DeleteOptions{}) })

	created.Spec.StaticInstances.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}}
	updated, err := ngs.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("adding a labelSelector must be allowed: %v", err)
	}
	updated.Spec.StaticInstances.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}}
	_, err = ngs.Update(ctx, updated, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.staticInstances.labelSelector") {
		t.Fatalf("changing the labelSelector must be refused naming the field, got %v", err)
	}
}

// TestExamplesAreAcceptedWithDefaults applies manifests/examples the way
// `make run` does and reads the objects back through the generated clients.
func TestExamplesAreAcceptedWithDefaults(t *testing.T) {
	ctx := framework.Context(t)
	applier, err := f.CP.NewApplier()
	if err != nil {
		t.Fatal(err)
	}
	if err := applier.ApplyFiles(ctx, filepath.Join(f.Root, "manifests", "examples")); err != nil {
		t.Fatalf("apply the examples: %v", err)
	}
	master, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "master", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"master update.maxConcurrent (defaulted)", master.Spec.Update.MaxConcurrent.String(), "1"},
		{"master disruptions.approvalMode", master.Spec.Disruptions.ApprovalMode, deckhousev1.ApprovalManual},
		{"worker update.maxConcurrent", worker.Spec.Update.MaxConcurrent.String(), "2"},
		{"worker drainBeforeApproval (defaulted)", *worker.Spec.Disruptions.Automatic.DrainBeforeApproval, true},
		{"worker drainTimeoutPolicy (defaulted)", worker.Spec.Disruptions.Automatic.DrainTimeoutPolicy, deckhousev1.DrainTimeoutDelete},
		{"worker kubelet.rootDir (defaulted)", worker.Spec.Kubelet.RootDir, "/var/lib/kubelet"},
		{"worker kubelet.containerLogMaxFiles (defaulted)", *worker.Spec.Kubelet.ContainerLogMaxFiles, int32(4)},
		{"worker kubelet.containerLogMaxSize", worker.Spec.Kubelet.ContainerLogMaxSize, "100Mi"},
		{"worker cri.containerd.maxConcurrentDownloads", *worker.Spec.CRI.Containerd.MaxConcurrentDownloads, int32(5)},
		{"worker nodeDrainTimeoutSecond", *worker.Spec.NodeDrainTimeoutSecond, int32(900)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	step, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, "inotify-limits.sh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if step.Spec.Weight != 50 || strings.Join(step.Spec.NodeGroups, ",") != "*" || strings.Join(step.Spec.Bundles, ",") != "*" {
		t.Errorf("NGC defaults: weight %d, nodeGroups %v, bundles %v; want 50, [*], [*]", step.Spec.Weight, step.Spec.NodeGroups, step.Spec.Bundles)
	}

	// A CloudEphemeral group gets the cloudInstances defaults.
	eph := &deckhousev1.NodeGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "ephemeral"},
		Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudEphemeral, CloudInstances: &deckhousev1.CloudInstancesSpec{
			ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "small"}, MinPerZone: 1, MaxPerZone: 3,
			Standby: ptr.To(intstr.FromString("10%")),
		}},
	}
	created, err := f.NM.DeckhouseV1().NodeGroups().Create(ctx, eph, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1().NodeGroups().Delete(context.Background(), "ephemeral", metav1.DeleteOptions{})
	})
	if ci := created.Spec.CloudInstances; *ci.MaxSurgePerZone != 1 || *ci.MaxUnavailablePerZone != 0 {
		t.Errorf("cloudInstances defaults: maxSurgePerZone %d, maxUnavailablePerZone %d; want 1, 0", *ci.MaxSurgePerZone, *ci.MaxUnavailablePerZone)
	}
	if created.Spec.Disruptions.ApprovalMode != deckhousev1.ApprovalAutomatic {
		t.Errorf("disruptions.approvalMode defaults to %q, want Automatic", created.Spec.Disruptions.ApprovalMode)
	}
}

// TestKubectlShowsNodeGroupColumns checks the printer columns users see,
// with status counters written through the status subresource.
func TestKubectlShowsNodeGroupColumns(t *testing.T) {
	ctx := framework.Context(t)
	ngs := f.NM.DeckhouseV1().NodeGroups()
	ng, err := ngs.Create(ctx, &deckhousev1.NodeGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "columns"},
		Spec:       deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudStatic},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ngs.Delete(context.Background(), "columns", metav1.DeleteOptions{}) })
	ng.Status = deckhousev1.NodeGroupStatus{Nodes: 3, Ready: 2, UpToDate: 1,
		ConditionSummary: &deckhousev1.ConditionSummary{Ready: "False", StatusMessage: "1 node is not ready"}}
	if _, err := ngs.UpdateStatus(ctx, ng, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	out := f.Kubectl(t, "get", "ng", "columns")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get ng columns:\n%s", out)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME TYPE READY NODES UPTODATE PINNED AGE" {
		t.Errorf("header = %q", lines[0])
	}
	// PINNED is empty: the group is not pinned.
	if got := strings.Fields(lines[1]); len(got) != 6 || strings.Join(got[:5], " ") != "columns CloudStatic 2 3 1" {
		t.Errorf("row = %q", lines[1])
	}
	wide := f.Kubectl(t, "get", "ng", "columns", "-o", "wide")
	for _, want := range []string{"INSTANCES", "DESIRED", "MIN", "MAX", "STATUS", "1 node is not ready"} {
		if !strings.Contains(wide, want) {
			t.Errorf("kubectl get ng -o wide should show %q:\n%s", want, wide)
		}
	}
	// The short name and the category work too.
	if out := f.Kubectl(t, "get", "deckhouse", "-o", "name"); !strings.Contains(out, "nodegroup.deckhouse.io/columns") {
		t.Errorf("kubectl get deckhouse should list node groups:\n%s", out)
	}
	if out := f.Kubectl(t, "explain", "nodegroup.spec.update.maxConcurrent"); !strings.Contains(out, "percentage") {
		t.Errorf("kubectl explain should show the field's documentation:\n%s", out)
	}
}

// TestGeneratedInformersAndListers runs the generated informer factory and
// lister against the live API.
func TestGeneratedInformersAndListers(t *testing.T) {
	ctx, cancel := context.WithCancel(framework.Context(t))
	factory := externalversions.NewSharedInformerFactory(f.NM, 0)
	lister := factory.Deckhouse().V1().NodeGroups().Lister()
	factory.Start(ctx.Done())
	// Shutdown waits for the informers, which stop when ctx is cancelled.
	defer factory.Shutdown()
	defer cancel()
	factory.WaitForCacheSync(ctx.Done())

	ngs := f.NM.DeckhouseV1().NodeGroups()
	if _, err := ngs.Create(ctx, &deckhousev1.NodeGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "informed", Labels: map[string]string{"suite": "informers"}},
		Spec:       deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ngs.Delete(context.Background(), "informed", metav1.DeleteOptions{}) })
	selector := labels.SelectorFromSet(labels.Set{"suite": "informers"})
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got, err := lister.List(selector)
		return err == nil && len(got) == 1 && got[0].Spec.NodeType == deckhousev1.NodeTypeStatic, err
	})
	if err != nil {
		t.Fatalf("the lister never saw the new NodeGroup: %v", err)
	}
}
