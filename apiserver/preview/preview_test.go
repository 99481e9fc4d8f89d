package preview

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/templates"
)

func group(name string) *deckhousev1.NodeGroup {
	return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
}

func config(name string, groups []string, content string) *deckhousev1alpha1.NodeGroupConfiguration {
	return &deckhousev1alpha1.NodeGroupConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: deckhousev1alpha1.NodeGroupConfigurationSpec{NodeGroups: groups, Bundles: []string{"*"}, Weight: 100, Content: content}}
}

// fakeInputs is the cluster state in and each group's latest render
// (none when rendered is nil).
type fakeInputs struct {
	in       bundles.Inputs
	rendered map[string]*bundles.Result
}

func (f fakeInputs) Snapshot() (bundles.Inputs, error) { return f.in, nil }

func (f fakeInputs) Rendered(group string) *bundles.Result { return f.rendered[group] }

type fakePublished map[string]*bundles.Published

func (f fakePublished) Get(group string) (*bundles.Published, bool) { p, ok := f[group]; return p, ok }

type fakeNodes map[string][]string

func (f fakeNodes) ByGroup(context.Context) (map[string][]string, error) { return f, nil }

// cluster is a previewer over in, with every group of in published as it
// renders now, and two nodes in group worker.
func cluster(t *testing.T, in bundles.Inputs) *Previewer {
	t.Helper()
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	published := fakePublished{}
	rendered := bundles.NewRenderer(tree).RenderAll(in)
	for g, r := range rendered {
		if r.Published == nil {
			t.Fatalf("group %s does not render: %v", g, r.Failures)
		}
		published[g] = r.Published
	}
	return New(tree, fakeInputs{in, rendered}, published, fakeNodes{"worker": {"w-0", "w-1"}})
}

func TestAConfigurationChangesOnlyTheGroupsItSelects(t *testing.T) {
	pv := cluster(t, bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("master"), group("worker")}})
	res, err := pv.Preview(context.Background(), Proposal{Config: config("tune", []string{"worker"}, "sysctl -w vm.swappiness=1\n")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 1 || res.Groups[0].Group != "worker" || len(res.Failures) != 0 {
		t.Fatalf("groups %+v failures %+v; want only worker", res.Groups, res.Failures)
	}
	g := res.Groups[0]
	if g.NodeCount != 2 || g.Disruptive || g.ApprovalMode != "Automatic" || g.Checksum == g.PreviousChecksum {
		t.Errorf("worker: %+v", g)
	}
	if len(g.Steps) != 1 || g.Steps[0].Name != "100_tune.sh" || g.Steps[0].Change != bashiblev1alpha1.StepAdded ||
		g.Steps[0].Diff != "--- /dev/null\n+++ b/100_tune.sh\n@@ -0,0 +1 @@\n+sysctl -w vm.swappiness=1\n" {
		t.Errorf("steps: %+v", g.Steps)
	}
}

func TestAnUnchangedConfigurationChangesNothing(t *testing.T) {
	c := config("tune", []string{"*"}, "echo\n")
	pv := cluster(t, bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("master"), group("worker")}, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{c}})
	res, err := pv.Preview(context.Background(), Proposal{Config: c.DeepCopy()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 0 || len(res.Failures) != 0 {
		t.Fatalf("an unchanged configuration changes %+v (failures %+v)", res.Groups, res.Failures)
	}
}

func TestMovingAConfigurationChangesTheGroupItLeavesToo(t *testing.T) {
	c := config("tune", []string{"master"}, "echo\n")
	pv := cluster(t, bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("master"), group("worker"), group("other")}, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{c}})
	moved := c.DeepCopy()
	moved.Spec.NodeGroups = []string{"worker"}
	res, err := pv.Preview(context.Background(), Proposal{Config: moved})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 2 || res.Groups[0].Group != "master" || res.Groups[1].Group != "worker" {
		t.Fatalf("groups %+v; want master (step removed) and worker (step added)", res.Groups)
	}
	if s := res.Groups[0].Steps; len(s) != 1 || s[0].Change != bashiblev1alpha1.StepRemoved || !strings.HasPrefix(s[0].Diff, "--- a/100_tune.sh\n+++ /dev/null\n") {
		t.Errorf("master: %+v", s)
	}
}

func TestAContainerdChangeIsDisruptive(t *testing.T) {
	pv := cluster(t, bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("worker")}})
	ng := group("worker")
	ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerdV2}
	res, err := pv.Preview(context.Background(), Proposal{NodeGroup: ng})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 1 || !res.Groups[0].Disruptive {
		t.Fatalf("a containerd change: %+v; want worker, disruptive", res.Groups)
	}
	found := false
	for _, s := range res.Groups[0].Steps {
		if s.Name == "040_containerd.sh" && len(s.Disruption) > 0 {
			found = true
		}
	}
	if !found {
		t.Errorf("040_containerd.sh is not a disruptive changed step: %+v", res.Groups[0].Steps)
	}
}

func TestAConfigurationThatDoesNotRenderIsItsOwnFailure(t *testing.T) {
	other := config("already-broken", []string{"master"}, "{{ .nope }}")
	in := bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("master"), group("worker")}}
	pv := cluster(t, in)
	pv.inputs = fakeInputs{in: bundles.Inputs{NodeGroups: in.NodeGroups, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{other}}}
	p := Proposal{Config: config("broken", []string{"*"}, "echo\n{{ .nodeGroup.nope }}\n")}
	res, err := pv.Preview(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	own := res.ProposalFailures(p)
	if len(own) != 2 || own[0].Group != "master" || own[1].Group != "worker" || !strings.Contains(own[0].Message, "line 2") {
		t.Fatalf("own failures %+v; want master and worker, naming line 2", own)
	}
	if len(res.Failures) != 3 {
		t.Errorf("failures %+v; want the proposal's two and already-broken's", res.Failures)
	}
}

func TestAPreviewWaitsForTheRunningOneAndGivesUpWithItsContext(t *testing.T) {
	pv := cluster(t, bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("worker")}})
	pv.running <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pv.Preview(ctx, Proposal{NodeGroup: group("worker")}); err != ErrBusy {
		t.Fatalf("a preview while another runs: %v, want ErrBusy", err)
	}
}

func TestANewGroupsFirstBundleIsWholeAndNotDisruptive(t *testing.T) {
	pv := cluster(t, bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("worker")}})
	res, err := pv.Preview(context.Background(), Proposal{NodeGroup: group("fresh")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 1 || res.Groups[0].Group != "fresh" || res.Groups[0].PreviousChecksum != "" || res.Groups[0].Disruptive {
		t.Fatalf("groups %+v; want only fresh, not published, not disruptive", res.Groups)
	}
	for _, s := range res.Groups[0].Steps {
		if s.Change != bashiblev1alpha1.StepAdded || len(s.Disruption) != 0 {
			t.Errorf("step %s: %s, disruption %q; want added, none", s.Name, s.Change, s.Disruption)
		}
	}
}

func TestDefaultConfigGivesTheAPIDefaults(t *testing.T) {
	c := &deckhousev1alpha1.NodeGroupConfiguration{}
	DefaultConfig(c, false)
	if c.Spec.Weight != 100 || c.Spec.NodeGroups[0] != "*" || c.Spec.Bundles[0] != "*" {
		t.Fatalf("defaults: %+v", c.Spec)
	}
	c = &deckhousev1alpha1.NodeGroupConfiguration{}
	DefaultConfig(c, true)
	if c.Spec.Weight != 0 {
		t.Fatalf("an explicit weight 0 became %d", c.Spec.Weight)
	}
}
