package admission

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/apiserver/preview"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/manifests"
)

// fakeNodes are a group's nodes and their labels.
type fakeNodes map[string]map[string]string

func (f fakeNodes) Labels(string) (map[string]map[string]string, error) { return f, nil }

func group(name string, mutate func(*deckhousev1.NodeGroup)) *deckhousev1.NodeGroup {
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	if mutate != nil {
		mutate(ng)
	}
	return ng
}

func withCRI(t deckhousev1.CRIType) func(*deckhousev1.NodeGroup) {
	return func(ng *deckhousev1.NodeGroup) { ng.Spec.CRI = &deckhousev1.CRISpec{Type: t} }
}

func withSwap(behavior string) func(*deckhousev1.NodeGroup) {
	return func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MemorySwap: &deckhousev1.MemorySwapSpec{SwapBehavior: behavior}}
	}
}

func mustRefusal(t *testing.T, old, ng *deckhousev1.NodeGroup, nodes GroupNodes) string {
	t.Helper()
	msg, err := Refusal(old, ng, nodes)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func TestCRIChangeRefusedWhileANodeHasItsOwnContainerdConfig(t *testing.T) {
	nodes := fakeNodes{
		"w-2": {deckhousev1.ContainerdConfigLabel: deckhousev1.ContainerdConfigCustomValue},
		"w-1": {deckhousev1.ContainerdConfigLabel: deckhousev1.ContainerdConfigCustomValue},
		"w-3": {deckhousev1.ContainerdConfigLabel: deckhousev1.ContainerdConfigDefaultValue},
	}
	got := mustRefusal(t, group("w", nil), group("w", withCRI(deckhousev1.CRINotManaged)), nodes)
	if want := "CRI cannot be changed because some nodes are using custom configuration: w-1 w-2"; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	// Unset and Containerd are the same runtime: no change, nothing refused.
	if got := mustRefusal(t, group("w", nil), group("w", withCRI(deckhousev1.CRIContainerd)), nodes); got != "" {
		t.Errorf("no runtime change, yet refused: %q", got)
	}
	// Another change of a group with such nodes is not refused.
	if got := mustRefusal(t, group("w", withCRI(deckhousev1.CRIContainerd)), group("w", withSwap("NoSwap")), nodes); got != "" {
		t.Errorf("an unrelated change refused: %q", got)
	}
	if got := mustRefusal(t, group("w", nil), group("w", withCRI(deckhousev1.CRINotManaged)), fakeNodes{"w-3": nodes["w-3"]}); got != "" {
		t.Errorf("no node has its own configuration, yet refused: %q", got)
	}
}

func TestContainerdV2RefusedWhileANodeCannotRunIt(t *testing.T) {
	nodes := fakeNodes{"w-1": {deckhousev1.ContainerdV2UnsupportedLabel: ""}, "w-2": {}}
	got := mustRefusal(t, group("w", withCRI(deckhousev1.CRIContainerd)), group("w", withCRI(deckhousev1.CRIContainerdV2)), nodes)
	want := `It is forbidden for NodeGroup "w" to use CRI ContainerdV2 because it contains nodes that do not support ContainerdV2. ` +
		"You can list them with: kubectl get node -l node.deckhouse.io/containerd-v2-unsupported,node.deckhouse.io/group=w"
	if got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	if got := mustRefusal(t, group("w", withCRI(deckhousev1.CRIContainerd)), group("w", withCRI(deckhousev1.CRIContainerdV2)), fakeNodes{"w-2": {}}); got != "" {
		t.Errorf("every node can run containerd 2, yet refused: %q", got)
	}
	// Leaving ContainerdV2 is never refused for it.
	if got := mustRefusal(t, group("w", withCRI(deckhousev1.CRIContainerdV2)), group("w", withCRI(deckhousev1.CRIContainerd)), nodes); got != "" {
		t.Errorf("leaving ContainerdV2 refused: %q", got)
	}
}

func TestLimitedSwapRefusedWhileANodeHasNoCgroupV2(t *testing.T) {
	v1 := fakeNodes{"w-1": {deckhousev1.CgroupLabel: "tmpfs"}, "w-2": {deckhousev1.CgroupLabel: deckhousev1.CgroupV2Value}}
	got := mustRefusal(t, group("w", nil), group("w", withSwap("LimitedSwap")), v1)
	if want := `memorySwap requires cgroup v2, but NodeGroup "w" contains nodes where cgroup v2 is not supported`; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	if got := mustRefusal(t, group("w", nil), group("w", withSwap("LimitedSwap")), fakeNodes{"w-1": {deckhousev1.CgroupLabel: "unknown"}}); got == "" {
		t.Error("a node whose cgroup file system is unknown must hold LimitedSwap back")
	}
	for name, nodes := range map[string]fakeNodes{
		"every node on cgroup v2":   {"w-2": {deckhousev1.CgroupLabel: deckhousev1.CgroupV2Value}},
		"a node that reported none": {"w-3": {}},
	} {
		if got := mustRefusal(t, group("w", nil), group("w", withSwap("LimitedSwap")), nodes); got != "" {
			t.Errorf("%s, yet refused: %q", name, got)
		}
	}
	if got := mustRefusal(t, group("w", withSwap("LimitedSwap")), group("w", withSwap("LimitedSwap")), v1); got != "" {
		t.Errorf("swap already on (no change), yet refused: %q", got)
	}
}

func TestMaxPodsBeyondThePodSubnetWarns(t *testing.T) {
	maxPods := func(n int32) *deckhousev1.NodeGroup {
		return group("w", func(ng *deckhousev1.NodeGroup) { ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To(n)} })
	}
	// The default /24 holds 253 addresses: 126 pods fit twice, 127 do not.
	if got := Warnings(nil, maxPods(126), bundles.Inputs{}); len(got) != 0 {
		t.Errorf("126 pods in a /24 warned: %v", got)
	}
	got := Warnings(nil, maxPods(127), bundles.Inputs{})
	if len(got) != 1 || got[0] != ".spec.kubelet.maxPods (127) is too high: may lead to IP exhaustion" {
		t.Errorf("127 pods in a /24: warnings %v", got)
	}
	// A /23 per node holds 509 addresses.
	wide := bundles.Inputs{ClusterConfiguration: []byte("apiVersion: deckhouse.io/v1\nkind: ClusterConfiguration\npodSubnetNodeCIDRPrefix: \"23\"\n")}
	if got := Warnings(nil, maxPods(127), wide); len(got) != 0 {
		t.Errorf("127 pods in a /23 warned: %v", got)
	}
}

func TestMasterCRIChangeWithFewerThanThreeAPIServersWarns(t *testing.T) {
	want := "it is disruptive to change cri.type in master node group for cluster with apiserver endpoints < 3"
	two := bundles.Inputs{Endpoints: []string{"10.0.0.1:6443", "10.0.0.2:6443"}}
	three := bundles.Inputs{Endpoints: []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}}
	if got := Warnings(group("master", nil), group("master", withCRI(deckhousev1.CRIContainerdV2)), two); len(got) != 1 || got[0] != want {
		t.Errorf("master's runtime changed with two API servers: warnings %v", got)
	}
	for name, tc := range map[string]struct {
		old, ng *deckhousev1.NodeGroup
		in      bundles.Inputs
	}{
		"three API servers":                  {group("master", nil), group("master", withCRI(deckhousev1.CRIContainerdV2)), three},
		"another group":                      {group("w", nil), group("w", withCRI(deckhousev1.CRIContainerdV2)), two},
		"the cluster default, made explicit": {group("master", nil), group("master", withCRI(deckhousev1.CRIContainerd)), two},
		"a create":                           {nil, group("master", withCRI(deckhousev1.CRIContainerdV2)), two},
	} {
		if got := Warnings(tc.old, tc.ng, tc.in); len(got) != 0 {
			t.Errorf("%s: warned %v", name, got)
		}
	}
}

// TestAGroupsNodesAreItsInstances: a node is judged with the group its
// Instance names (node-manager's record), never the one its own Node label
// claims; a node whose Node is gone is left out.
func TestAGroupsNodesAreItsInstances(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for name, g := range map[string]string{"w-1": "w", "w-2": "w", "other-1": "other"} {
		if err := idx.Add(&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: g}}}); err != nil {
			t.Fatal(err)
		}
	}
	nodeLabels := map[string]map[string]string{
		"w-1": {deckhousev1.NodeGroupLabel: "w", deckhousev1.ContainerdConfigLabel: deckhousev1.ContainerdConfigCustomValue},
		// Relabelled by its kubelet into w: still other's node.
		"other-1": {deckhousev1.NodeGroupLabel: "w", deckhousev1.ContainerdConfigLabel: deckhousev1.ContainerdConfigCustomValue},
	}
	g := InstanceGroupNodes{Instances: nmlisters.NewInstanceLister(idx), Nodes: func(name string) (map[string]string, bool, error) {
		l, ok := nodeLabels[name]
		return l, ok, nil
	}}
	got := mustRefusal(t, group("w", nil), group("w", withCRI(deckhousev1.CRINotManaged)), g)
	if want := "CRI cannot be changed because some nodes are using custom configuration: w-1"; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	g.Synced = func() bool { return false }
	if _, err := Refusal(group("w", nil), group("w", withCRI(deckhousev1.CRINotManaged)), g); err == nil {
		t.Error("unloaded caches must be an error, not a group without nodes")
	}
}

// TestPolicyWebhookRefusesAndFailsClosed: the webhook answers a refusal
// with Deckhouse's message, and refuses, saying so, when it cannot read
// the nodes.
func TestPolicyWebhookRefusesAndFailsClosed(t *testing.T) {
	raw := func(ng *deckhousev1.NodeGroup) runtime.RawExtension {
		b, err := json.Marshal(ng)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	req := &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Update, Kind: nodeGroupKind, Name: "w",
		Object: raw(group("w", withCRI(deckhousev1.CRIContainerdV2))), OldObject: raw(group("w", nil))}
	d := NewPolicyWebhook(fakeNodes{"w-1": {deckhousev1.ContainerdV2UnsupportedLabel: ""}}).review(context.Background(), req)
	if d.Allowed || !strings.HasPrefix(d.Message, `It is forbidden for NodeGroup "w" to use CRI ContainerdV2`) {
		t.Errorf("decision %+v", d)
	}
	d = NewPolicyWebhook(failingNodes{}).review(context.Background(), req)
	if d.Allowed || !strings.Contains(d.Message, "try again") {
		t.Errorf("unreadable nodes must refuse, saying so: %+v", d)
	}
	req.Operation = admissionv1.Create
	if d := NewPolicyWebhook(failingNodes{}).review(context.Background(), req); !d.Allowed {
		t.Errorf("a create is not judged: %+v", d)
	}
}

type failingNodes struct{}

func (failingNodes) Labels(string) (map[string]map[string]string, error) {
	return nil, context.DeadlineExceeded
}

// TestPolicyWebhookIsCalledOnlyForTheChangesItJudges evaluates the shipped
// matchConditions of the nodegroup-policy webhook with kube-apiserver's
// own matcher: it fails closed, so it must see nothing else.
func TestPolicyWebhookIsCalledOnlyForTheChangesItJudges(t *testing.T) {
	raw, err := manifests.FS.ReadFile(deckhousev1.BashibleAPIServerName + "/preview-webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(raw, cfg); err != nil {
		t.Fatal(err)
	}
	var hook *admissionregistrationv1.ValidatingWebhook
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == bashiblev1alpha1.NodeGroupPolicyWebhookName {
			hook = &cfg.Webhooks[i]
		}
	}
	if hook == nil {
		t.Fatalf("preview-webhook.yaml has no webhook %s", bashiblev1alpha1.NodeGroupPolicyWebhookName)
	}
	if hook.FailurePolicy == nil || *hook.FailurePolicy != admissionregistrationv1.Fail || hook.ClientConfig.Service == nil ||
		hook.ClientConfig.Service.Path == nil || *hook.ClientConfig.Service.Path != bashiblev1alpha1.NodeGroupPolicyWebhookPath {
		t.Fatalf("the webhook must fail closed and call %s: %+v", bashiblev1alpha1.NodeGroupPolicyWebhookPath, hook)
	}
	matcher := webhook.NewValidatingWebhookAccessor("policy", bashiblev1alpha1.PreviewWebhookConfigurationName, hook).
		GetCompiledMatcher(cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())))
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	static := map[string]any{"nodeType": "Static"}
	for _, tc := range []struct {
		name     string
		obj, old map[string]any
		want     bool
	}{
		{"cri.type set", map[string]any{"nodeType": "Static", "cri": map[string]any{"type": "ContainerdV2"}}, static, true},
		{"cri.type removed", static, map[string]any{"nodeType": "Static", "cri": map[string]any{"type": "NotManaged"}}, true},
		{"LimitedSwap turned on", map[string]any{"nodeType": "Static", "kubelet": map[string]any{"memorySwap": map[string]any{"swapBehavior": "LimitedSwap"}}}, static, true},
		{"LimitedSwap kept", map[string]any{"nodeType": "Static", "kubelet": map[string]any{"memorySwap": map[string]any{"swapBehavior": "LimitedSwap", "swappiness": 10}}},
			map[string]any{"nodeType": "Static", "kubelet": map[string]any{"memorySwap": map[string]any{"swapBehavior": "LimitedSwap"}}}, false},
		{"another change", map[string]any{"nodeType": "Static", "kubelet": map[string]any{"maxPods": 200}}, static, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, old := object("NodeGroup", tc.obj, nil), object("NodeGroup", tc.old, nil)
			gvk := schema.GroupVersionKind{Group: deckhousev1.GroupName, Version: "v1", Kind: "NodeGroup"}
			attr := admission.NewAttributesRecord(obj, old, gvk, "", "worker",
				schema.GroupVersionResource{Group: deckhousev1.GroupName, Version: "v1", Resource: "nodegroups"}, "", admission.Update, nil, false, alice)
			got := matcher.Match(context.Background(), &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}, nil, nil)
			if got.Error != nil {
				t.Fatalf("matchConditions failed (condition %q): %v", got.FailedConditionName, got.Error)
			}
			if got.Matches != tc.want {
				t.Fatalf("sent to the webhook: %v, want %v", got.Matches, tc.want)
			}
		})
	}
}

type fixedSettings bundles.Inputs

func (s fixedSettings) Snapshot() (bundles.Inputs, error) { return bundles.Inputs(s), nil }

// TestThePreviewCarriesDeckhousesWarnings: kubectl apply prints
// Deckhouse's warnings, word for word, beside the preview's.
func TestThePreviewCarriesDeckhousesWarnings(t *testing.T) {
	fake := &fakePreviewer{res: &preview.Result{}}
	ng, err := json.Marshal(group("master", func(ng *deckhousev1.NodeGroup) {
		ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerdV2}
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](200)}
	}))
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(group("master", nil))
	resp := review(t, NewWebhook(fake, fixedSettings{Endpoints: []string{"10.0.0.1:6443"}}), &admissionv1.AdmissionRequest{UID: "u1",
		Operation: admissionv1.Update, Kind: nodeGroupKind, Name: "master", Object: runtime.RawExtension{Raw: ng}, OldObject: runtime.RawExtension{Raw: old}})
	if !resp.Allowed {
		t.Fatalf("refused: %+v", resp.Result)
	}
	for _, want := range []string{".spec.kubelet.maxPods (200) is too high: may lead to IP exhaustion",
		"it is disruptive to change cri.type in master node group for cluster with apiserver endpoints < 3"} {
		if !slices.Contains(resp.Warnings, want) {
			t.Errorf("warnings %q lack %q", resp.Warnings, want)
		}
	}
}
