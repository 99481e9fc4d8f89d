package preview

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/templates"
	"github.com/node-manager/node-manager/templates/sandbox"
)

// The test binary is also the render worker of the sandboxed tests.
func TestMain(m *testing.M) {
	sandbox.RunWorkerIfRequested()
	os.Exit(m.Run())
}

// countingSandbox records which NodeGroupConfigurations the sandbox it
// wraps was asked to render.
type countingSandbox struct {
	templates.Untrusted
	mu       sync.Mutex
	requests int
	names    []string
}

func (s *countingSandbox) RenderJSON(texts []templates.NamedText, values []byte) ([]string, []error) {
	s.mu.Lock()
	s.requests++
	for _, t := range texts {
		s.names = append(s.names, t.Name)
	}
	s.mu.Unlock()
	return s.Untrusted.RenderJSON(texts, values)
}

func (s *countingSandbox) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests, s.names = 0, nil
}

// sandboxedTree is the built-in tree rendering NodeGroupConfigurations in
// worker processes (this test binary), as the server does, counted.
func sandboxedTree(t *testing.T) (*templates.Tree, *countingSandbox) {
	t.Helper()
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := sandbox.New(sandbox.Config{Library: tree.Library(), Workers: 2, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	counter := &countingSandbox{Untrusted: pool}
	return tree.WithSandbox(counter), counter
}

// labelled is a group whose nodes carry labels, which templates read.
func labelled(name string, labels map[string]string) *deckhousev1.NodeGroup {
	ng := group(name)
	ng.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Labels: labels}
	return ng
}

func weighted(c *deckhousev1alpha1.NodeGroupConfiguration, weight int32) *deckhousev1alpha1.NodeGroupConfiguration {
	c.Spec.Weight = weight
	return c
}

// contextTemplate reads the render context: the group, its labels, the
// Kubernetes version.
const contextTemplate = "echo {{ .nodeGroup.name }} {{ .kubernetesVersion }}\n{{ range $k, $v := .nodeGroup.nodeTemplate.labels }}echo {{ $k }}={{ $v }}\n{{ end }}"

// TestAComposedPreviewIsTheWholeRender previews varied proposals twice:
// composed from the groups' current renders (what the server does) and
// with every group rendered whole (a previewer with no current render),
// and wants the same groups, checksums, steps, diffs and failures (so the
// same warnings and refusals) from both.
func TestAComposedPreviewIsTheWholeRender(t *testing.T) {
	tree, _ := sandboxedTree(t)
	groups := []*deckhousev1.NodeGroup{
		labelled("master", map[string]string{deckhousev1.ControlPlaneRoleLabel: ""}),
		labelled("worker", map[string]string{"tier": "app", "zone": "a"}),
		labelled("edge", map[string]string{"tier": "edge"}),
	}
	deb := config("deb", []string{"*"}, "echo deb\n")
	deb.Spec.Bundles = []string{"debian"}
	current := []*deckhousev1alpha1.NodeGroupConfiguration{
		config("ctx.sh", []string{"*"}, contextTemplate),
		weighted(config("early", []string{"worker"}, "echo early\n"), 10),
		weighted(config("late", []string{"worker", "master"}, "echo late {{ .nodeGroup.name }}\n"), 900),
		weighted(deb, 300),
		weighted(config("x.sh", []string{"worker"}, "echo x\n"), 500),
		weighted(config("y", []string{"master"}, "echo y\n"), 500),
	}
	in := bundles.Inputs{NodeGroups: groups, Configs: current}
	find := func(name string) *deckhousev1alpha1.NodeGroupConfiguration {
		for _, c := range current {
			if c.Name == name {
				return c.DeepCopy()
			}
		}
		t.Fatalf("no configuration %s", name)
		return nil
	}
	with := func(name string, change func(*deckhousev1alpha1.NodeGroupConfiguration)) *deckhousev1alpha1.NodeGroupConfiguration {
		c := find(name)
		change(c)
		return c
	}
	bundled := config("two-bundles", []string{"*"}, "echo {{ .nodeGroup.name }}\n")
	bundled.Spec.Bundles = []string{"ubuntu-lts", "debian"}
	badBundle := config("bad-bundle", []string{"*"}, "echo\n")
	badBundle.Spec.Bundles = []string{"Not A Bundle"}

	cases := []struct {
		name string
		p    Proposal
		// wantRefused: the proposal's own configuration does not render.
		wantRefused bool
	}{
		{name: "a new step reading the context, in every group", p: Proposal{Config: config("hello", []string{"*"}, contextTemplate+"echo hello\n")}},
		{name: "a changed step reading the context", p: Proposal{Config: with("ctx.sh", func(c *deckhousev1alpha1.NodeGroupConfiguration) {
			c.Spec.Content = "echo {{ .nodeGroup.name | upper }}\n"
		})}},
		{name: "a new weight renames the step's file", p: Proposal{Config: with("early", func(c *deckhousev1alpha1.NodeGroupConfiguration) { c.Spec.Weight = 20 })}},
		{name: "a new weight moves the step before every other", p: Proposal{Config: with("late", func(c *deckhousev1alpha1.NodeGroupConfiguration) { c.Spec.Weight = 0 })}},
		{name: "the step moves to another group", p: Proposal{Config: with("early", func(c *deckhousev1alpha1.NodeGroupConfiguration) { c.Spec.NodeGroups = []string{"master"} })}},
		{name: "the step widens to every group", p: Proposal{Config: with("early", func(c *deckhousev1alpha1.NodeGroupConfiguration) { c.Spec.NodeGroups = []string{"*"} })}},
		{name: "the step leaves every group", p: Proposal{Config: with("late", func(c *deckhousev1alpha1.NodeGroupConfiguration) { c.Spec.NodeGroups = []string{"gone"} })}},
		{name: "a step for some bundles", p: Proposal{Config: bundled}},
		{name: "an unchanged step", p: Proposal{Config: find("late")}},
		{name: "a step of another's file, sorting first (it takes the file)", p: Proposal{Config: weighted(config("x", []string{"worker"}, "echo taken\n"), 500)}},
		{name: "a step of another's file, sorting after it", p: Proposal{Config: weighted(config("y.sh", []string{"master"}, "echo mine\n"), 500)}, wantRefused: true},
		{name: "a step of a built-in step's file", p: Proposal{Config: weighted(config("containerd", []string{"worker"}, "echo\n"), 40)}, wantRefused: true},
		{name: "a step that does not render", p: Proposal{Config: config("broken", []string{"*"}, "echo\n{{ .nodeGroup.nope }}\n")}, wantRefused: true},
		{name: "a step the renderer refuses", p: Proposal{Config: badBundle}, wantRefused: true},
		{name: "a step that is not bash", p: Proposal{Config: config("not-bash", []string{"edge"}, "if then fi\n")}, wantRefused: true},
		{name: "a changed step that no longer renders", p: Proposal{Config: with("ctx.sh", func(c *deckhousev1alpha1.NodeGroupConfiguration) {
			c.Spec.Content = "{{ .nodeGroup.nodeTemplate.labels.zone }}\n"
		})}, wantRefused: true},
		{name: "a NodeGroup (rendered whole)", p: Proposal{NodeGroup: labelled("worker", map[string]string{"tier": "app", "zone": "b"})}},
		{name: "a NodeGroup and a configuration", p: Proposal{NodeGroup: labelled("edge", map[string]string{"tier": "far"}), Config: config("hello", []string{"*"}, contextTemplate)}},
	}
	for _, state := range []struct {
		name string
		in   bundles.Inputs
		// broken: a group whose current render fails, which the preview
		// renders whole.
		broken string
	}{
		{name: "every group renders", in: in},
		{name: "edge already fails", in: bundles.Inputs{NodeGroups: groups, Configs: append(append([]*deckhousev1alpha1.NodeGroupConfiguration{}, current...),
			config("already-broken", []string{"edge"}, "{{ .nope }}\n"))}, broken: "edge"},
	} {
		rendered := bundles.NewRenderer(tree).RenderAll(state.in)
		published := fakePublished{}
		for g, r := range rendered {
			if r.Published == nil && g != state.broken {
				t.Fatalf("%s: group %s does not render: %v", state.name, g, r.Failures)
			}
			if r.Published != nil {
				published[g] = r.Published
			}
		}
		nodes := fakeNodes{"worker": {"w-0", "w-1"}, "master": {"m-0"}}
		composing := New(tree, fakeInputs{state.in, rendered}, published, nodes)
		whole := New(tree, fakeInputs{in: state.in}, published, nodes)
		for _, tc := range cases {
			t.Run(state.name+"/"+tc.name, func(t *testing.T) {
				want, err := whole.Preview(context.Background(), tc.p)
				if err != nil {
					t.Fatal(err)
				}
				got, err := composing.Preview(context.Background(), tc.p)
				if err != nil {
					t.Fatal(err)
				}
				if want.Composed != 0 {
					t.Fatalf("the whole render composed %d groups", want.Composed)
				}
				if !reflect.DeepEqual(got.Groups, want.Groups) {
					t.Errorf("composed: groups\n%+v\nwhole render:\n%+v", got.Groups, want.Groups)
				}
				if !reflect.DeepEqual(got.Failures, want.Failures) {
					t.Errorf("composed: failures\n%+v\nwhole render:\n%+v", got.Failures, want.Failures)
				}
				// What the webhook asks for (the steps, no diffs or
				// checksums) is the same groups, steps and failures.
				stepsOnly := tc.p
				stepsOnly.StepsOnly = true
				brief, err := composing.Preview(context.Background(), stepsOnly)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(withoutDiffs(brief.Groups), withoutDiffs(want.Groups)) || !reflect.DeepEqual(brief.Failures, want.Failures) {
					t.Errorf("steps only: groups\n%+v\nfailures %+v\nwhole render:\n%+v\nfailures %+v", brief.Groups, brief.Failures, want.Groups, want.Failures)
				}
				for _, g := range brief.Groups {
					for _, st := range g.Steps {
						if st.Diff != "" {
							t.Errorf("steps only: group %s step %s has a diff", g.Group, st.Name)
						}
					}
				}
				// The webhook's warnings and refusal are a function of these
				// (admission.Decide): equal here, equal there.
				if refused := len(got.ProposalFailures(tc.p)) > 0; refused != tc.wantRefused {
					t.Errorf("refused: %v, want %v (failures %+v)", refused, tc.wantRefused, got.Failures)
				}
				// Every group a proposal of a configuration alone changes
				// is composed but the one whose render fails now; a
				// proposed NodeGroup's own group renders whole.
				wantWhole := 0
				for _, ng := range affected(state.in, apply(state.in, tc.p), tc.p) {
					if ng.Name == state.broken || (tc.p.NodeGroup != nil && ng.Name == tc.p.NodeGroup.Name) {
						wantWhole++
					}
				}
				if got.Rendered != wantWhole || got.Composed+got.Rendered != want.Rendered {
					t.Errorf("composed %d and rendered %d groups whole; want %d whole of %d", got.Composed, got.Rendered, wantWhole, want.Rendered)
				}
			})
		}
	}
}

// withoutDiffs is groups with no step diffs and no new checksums.
func withoutDiffs(groups []GroupChange) []GroupChange {
	out := make([]GroupChange, 0, len(groups))
	for _, g := range groups {
		g.Checksum = ""
		g.Steps = slices.Clone(g.Steps)
		for i := range g.Steps {
			g.Steps[i].Diff = ""
		}
		out = append(out, g)
	}
	return out
}

// TestAConfigurationForEveryGroupRendersOnlyItsStep: a preview of a
// configuration that selects every group asks the sandbox for that
// configuration's step once per group, not for every group's whole set of
// configurations again (the cost of a `nodeGroups: ["*"]` configuration
// at 100 groups was about 2 s a group).
func TestAConfigurationForEveryGroupRendersOnlyItsStep(t *testing.T) {
	tree, sandboxed := sandboxedTree(t)
	var groups []*deckhousev1.NodeGroup
	for i := range 8 {
		groups = append(groups, labelled(fmt.Sprintf("group-%d", i), map[string]string{"n": fmt.Sprint(i)}))
	}
	var configs []*deckhousev1alpha1.NodeGroupConfiguration
	for i := range 5 {
		configs = append(configs, weighted(config(fmt.Sprintf("step-%d.sh", i), []string{"*"}, contextTemplate), int32(200+i)))
	}
	in := bundles.Inputs{NodeGroups: groups, Configs: configs}
	rendered := bundles.NewRenderer(tree).RenderAll(in)
	published := fakePublished{}
	for g, r := range rendered {
		if r.Published == nil {
			t.Fatalf("group %s does not render: %v", g, r.Failures)
		}
		published[g] = r.Published
	}
	pv := New(tree, fakeInputs{in, rendered}, published, fakeNodes{})
	sandboxed.reset()
	res, err := pv.Preview(context.Background(), Proposal{Config: config("every.sh", []string{"*"}, "echo {{ .nodeGroup.name }}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != len(groups) || len(res.Failures) != 0 {
		t.Fatalf("groups %+v failures %+v; want all %d groups changed", res.Groups, res.Failures, len(groups))
	}
	for _, g := range res.Groups {
		if len(g.Steps) != 1 || g.Steps[0].Name != "100_every.sh" || g.Steps[0].Change != bashiblev1alpha1.StepAdded ||
			!strings.Contains(g.Steps[0].Diff, "+echo "+g.Group+"\n") {
			t.Errorf("group %s: steps %+v; want 100_every.sh added, echoing the group's name", g.Group, g.Steps)
		}
	}
	sandboxed.mu.Lock()
	defer sandboxed.mu.Unlock()
	want := len(groups)
	if len(sandboxed.names) != want || sandboxed.requests != want {
		t.Fatalf("the sandbox rendered %d templates in %d requests (%v); want the proposal's step once per group: %d",
			len(sandboxed.names), sandboxed.requests, sandboxed.names, want)
	}
	for _, n := range sandboxed.names {
		if n != "NodeGroupConfiguration/every.sh" {
			t.Fatalf("the sandbox rendered %s; want only the proposal", n)
		}
	}
	sandboxed.mu.Unlock()

	// A plain script (no template action) renders to itself in every
	// group: nothing is sent to the sandbox, and it is still checked as
	// bash.
	sandboxed.reset()
	plain, err := pv.Preview(context.Background(), Proposal{Config: config("plain.sh", []string{"*"}, "sysctl -w vm.swappiness=1\n"), StepsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Groups) != len(groups) || len(plain.Failures) != 0 {
		t.Fatalf("a plain script: groups %+v failures %+v; want all %d groups changed", plain.Groups, plain.Failures, len(groups))
	}
	notBash, err := pv.Preview(context.Background(), Proposal{Config: config("not-bash.sh", []string{"*"}, "if then fi\n"), StepsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if f := notBash.ProposalFailures(Proposal{Config: config("not-bash.sh", nil, "")}); len(f) != len(groups) || !strings.Contains(f[0].Message, "bash cannot parse") {
		t.Errorf("a plain script that is not bash: failures %+v; want it refused in every group", notBash.Failures)
	}
	sandboxed.mu.Lock()
	if sandboxed.requests != 0 {
		t.Errorf("plain scripts went to the sandbox %d times (%v); want none", sandboxed.requests, sandboxed.names)
	}
}

// A group's current render behind the configurations (changes the bundle
// controller has not rendered yet) is composed from, rendering what
// changed since too; one under another render context (here the cluster
// settings changed since) is not: the group renders whole.
func TestACurrentRenderIsComposedFromOnlyUnderTheSameContext(t *testing.T) {
	tree, sandboxed := sandboxedTree(t)
	in := bundles.Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("worker")}, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{config("a", []string{"*"}, "echo a {{ .nodeGroup.name }}\n")}}
	behind := bundles.NewRenderer(tree).RenderAll(bundles.Inputs{NodeGroups: in.NodeGroups})
	published := fakePublished{"worker": behind["worker"].Published}
	p := Proposal{Config: config("b", []string{"*"}, "echo b {{ .nodeGroup.name }}\n")}
	want, err := New(tree, fakeInputs{in: in}, published, fakeNodes{}).Preview(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	sandboxed.reset()
	res, err := New(tree, fakeInputs{in, behind}, published, fakeNodes{}).Preview(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Composed != 1 || res.Rendered != 0 || !reflect.DeepEqual(res.Groups, want.Groups) || len(want.Groups) != 1 || len(want.Groups[0].Steps) != 2 {
		t.Fatalf("composed %d, whole %d, groups %+v; want worker composed, a and b added, as the whole render: %+v", res.Composed, res.Rendered, res.Groups, want.Groups)
	}
	if len(sandboxed.names) != 2 {
		t.Errorf("the sandbox rendered %v; want a and b", sandboxed.names)
	}

	otherSettings := bundles.Inputs{NodeGroups: in.NodeGroups, Configs: in.Configs, ClusterConfiguration: []byte("clusterDomain: other.local\n")}
	res, err = New(tree, fakeInputs{otherSettings, behind}, published, fakeNodes{}).Preview(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Composed != 0 || res.Rendered != 1 || len(res.Failures) != 0 || len(res.Groups) != 1 {
		t.Fatalf("under other cluster settings: composed %d, whole %d, failures %+v; want the group rendered whole", res.Composed, res.Rendered, res.Failures)
	}
}
