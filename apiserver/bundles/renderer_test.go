package bundles

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

func group(name string) *deckhousev1.NodeGroup {
	return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
}

func config(name string, groups []string, content string) *deckhousev1alpha1.NodeGroupConfiguration {
	return &deckhousev1alpha1.NodeGroupConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: deckhousev1alpha1.NodeGroupConfigurationSpec{NodeGroups: groups, Bundles: []string{"*"}, Weight: 50, Content: content}}
}

func newRenderer(t *testing.T) *Renderer {
	t.Helper()
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	return NewRenderer(tree)
}

func TestRendererRerendersOnlyAffectedGroups(t *testing.T) {
	r := newRenderer(t)
	in := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a"), group("b"), group("c")}}
	first := r.RenderAll(in)
	for g, res := range first {
		if res.Cached || res.Published == nil {
			t.Fatalf("%s: first render cached=%v published=%v", g, res.Cached, res.Published != nil)
		}
	}
	in.Configs = []*deckhousev1alpha1.NodeGroupConfiguration{config("only-b.sh", []string{"b"}, "echo b")}
	second := r.RenderAll(in)
	if !second["a"].Cached || second["b"].Cached || !second["c"].Cached {
		t.Fatalf("an NGC for b: cached a=%v b=%v c=%v, want only b re-rendered", second["a"].Cached, second["b"].Cached, second["c"].Cached)
	}
	if second["b"].Published.Checksum == first["b"].Published.Checksum || second["a"].Published.Checksum != first["a"].Published.Checksum {
		t.Error("only b's checksum may change")
	}

	in.Configs = append(in.Configs, config("all.sh", []string{"*"}, "{{ .nodeGroup.nope }}"))
	third := r.RenderAll(in)
	for _, g := range []string{"a", "b", "c"} {
		if third[g].Published != nil || len(third[g].Failures) != 1 || third[g].Failures[0].Custom != "all.sh" {
			t.Errorf("%s: a broken NGC for every group must fail every group, attributed to it: %+v", g, third[g].Failures)
		}
	}

	in.Configs = in.Configs[:1]
	in.NodeGroups = in.NodeGroups[:2]
	fourth := r.RenderAll(in)
	if len(fourth) != 2 || fourth["a"].Published == nil || fourth["a"].Published.Checksum != first["a"].Published.Checksum {
		t.Errorf("after fixing and removing c: %+v", fourth)
	}
}

func TestRendererFailsEveryGroupOnABadClusterConfiguration(t *testing.T) {
	r := newRenderer(t)
	res := r.RenderAll(Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a")}, ClusterConfiguration: []byte("serviceSubnetCIDR: nonsense")})
	if res["a"].Published != nil || len(res["a"].Failures) != 1 {
		t.Fatalf("%+v", res["a"])
	}
}

// TestRendererReadsTheStaticClusterConfiguration: Deckhouse's
// StaticClusterConfiguration reaches the kubelet step of Static groups (and
// changes their checksum); a bad one fails every group, naming the Secret.
func TestRendererReadsTheStaticClusterConfiguration(t *testing.T) {
	r := newRenderer(t)
	in := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a")}} // a Static group
	before := r.RenderAll(in)["a"]
	in.StaticClusterConfiguration = []byte("kind: StaticClusterConfiguration\ninternalNetworkCIDRs: [192.168.10.0/24]\n")
	after := r.RenderAll(in)["a"]
	if before.Published == nil || after.Published == nil {
		t.Fatalf("render failed: %+v %+v", before, after)
	}
	if before.Published.Checksum == after.Published.Checksum || !strings.Contains(after.Published.Steps["060_kubelet.sh"], "internal_network_cidrs=('192.168.10.0/24')") {
		t.Errorf("the internal network should reach the kubelet step:\n%s", after.Published.Steps["060_kubelet.sh"])
	}
	in.StaticClusterConfiguration = []byte("internalNetworkCIDRs: ['10.0.0.0/8; reboot']")
	res := r.RenderAll(in)["a"]
	if res.Published != nil || len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Err.Error(), "kube-system/d8-static-cluster-configuration: static-cluster-configuration.yaml: internalNetworkCIDRs[0]") {
		t.Fatalf("a bad StaticClusterConfiguration should fail the group naming it: %+v", res)
	}
}

// TestComposeGivesTheBundleRenderGives: a render composed from a group's
// current render (Compose) is the one Render gives from the new inputs,
// bashible.sh, bootstrap and every step, also from a render behind the
// configurations; a render under another render context, by another
// template tree or a failed one is not composed from.
func TestComposeGivesTheBundleRenderGives(t *testing.T) {
	current := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a")}, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{
		config("keep.sh", []string{"*"}, "echo {{ .nodeGroup.name }}\n"), config("change.sh", []string{"a"}, "echo old\n"), config("drop.sh", []string{"a"}, "echo drop\n")}}
	base := newRenderer(t).RenderAll(current)["a"]
	changed := config("change.sh", []string{"a"}, "echo new {{ .kubernetesVersion }}\n")
	changed.Spec.Weight = 70
	next := Inputs{NodeGroups: current.NodeGroups, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{current.Configs[0], changed, config("new.sh", []string{"*"}, "echo new\n")}}
	composed, ok := newRenderer(t).Compose(group("a"), next, base)
	if !ok {
		t.Fatal("not composed from a current render of the same inputs")
	}
	whole := newRenderer(t).Render(group("a"), next)
	if composed.Published == nil || whole.Published == nil {
		t.Fatalf("composed %+v, whole %+v", composed.Failures, whole.Failures)
	}
	c, w := composed.Published, whole.Published
	if c.Checksum != w.Checksum || !c.Bashible.Equal(w.Bashible) || c.Bootstrap != w.Bootstrap || c.KubernetesVersion != w.KubernetesVersion ||
		c.CRI != w.CRI || c.ClusterSettingsDigest != w.ClusterSettingsDigest || !maps.Equal(c.Steps, w.Steps) || !slices.Equal(composed.Custom, whole.Custom) {
		t.Fatalf("composed %s with steps %v; the whole render %s with %v", c.Checksum, slices.Sorted(maps.Keys(c.Steps)), w.Checksum, slices.Sorted(maps.Keys(w.Steps)))
	}
	// A current render behind the inputs (configurations changed since)
	// is composed from too: what changed since renders as well.
	stale := newRenderer(t).RenderAll(Inputs{NodeGroups: current.NodeGroups, Configs: current.Configs[1:]})["a"]
	if fromStale, ok := newRenderer(t).Compose(group("a"), next, stale); !ok || fromStale.Published == nil || fromStale.Published.Checksum != w.Checksum {
		t.Errorf("composed from a render behind the inputs: %v %+v", ok, fromStale)
	}
	// Without the checksum (ComposeSteps), the same steps.
	if steps, ok := newRenderer(t).ComposeSteps(group("a"), next, base); !ok || steps.Published == nil || steps.Published.Checksum != "" ||
		!maps.Equal(steps.Published.Steps, w.Steps) || !steps.Published.Bashible.Equal(w.Bashible) {
		t.Errorf("ComposeSteps: %v %+v; want the whole render's steps and no checksum", ok, steps)
	}
	// A group with node users composes: they are part of its render
	// context, on both sides.
	withUsers := func(in Inputs) Inputs {
		in.NodeUsers = []*deckhousev1.NodeUser{{ObjectMeta: metav1.ObjectMeta{Name: "alice"}, Spec: deckhousev1.NodeUserSpec{
			UID: 1100, SSHPublicKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDWXs6ivnQQ1yIwbmB4Om9p0CXUsImyNTFBYpTdnkZKl"}, PasswordHash: "!", NodeGroups: []string{"a"}}}}
		return in
	}
	usersBase := newRenderer(t).RenderAll(withUsers(current))["a"]
	usersWhole := newRenderer(t).Render(group("a"), withUsers(next))
	if fromUsers, ok := newRenderer(t).Compose(group("a"), withUsers(next), usersBase); !ok || fromUsers.Published == nil || usersWhole.Published == nil ||
		fromUsers.Published.Checksum != usersWhole.Published.Checksum {
		t.Errorf("a group with a NodeUser: composed %v %+v; want the whole render %+v", ok, fromUsers, usersWhole.Failures)
	}
	other := group("a")
	other.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Labels: map[string]string{"x": "y"}}
	if _, ok := newRenderer(t).Compose(other, next, base); ok {
		t.Error("composed from a render with another render context")
	}
	failed := newRenderer(t).RenderAll(Inputs{NodeGroups: current.NodeGroups, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{config("bad.sh", []string{"*"}, "{{ .nope }}")}})["a"]
	if _, ok := newRenderer(t).Compose(group("a"), next, failed); ok {
		t.Error("composed from a failed render")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "steps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "steps", "098_extra.sh.tpl"), []byte("echo extra\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree, err := templates.LoadTree(templates.Overlay(templates.Builtin(), dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := NewRenderer(tree).Compose(group("a"), next, base); ok {
		t.Error("composed from a render of another template tree")
	}
}

// TestRendererNodeUsersRerenderOnlyTheirGroups: a NodeUser re-renders and
// changes the checksum of the groups it selects and no other; a NodeUser
// the API should have refused fails only the groups it selects, naming it.
func TestRendererNodeUsersRerenderOnlyTheirGroups(t *testing.T) {
	r := newRenderer(t)
	in := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a"), group("b")}}
	first := r.RenderAll(in)
	user := &deckhousev1.NodeUser{ObjectMeta: metav1.ObjectMeta{Name: "alice"}, Spec: deckhousev1.NodeUserSpec{
		UID: 1100, SSHPublicKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDWXs6ivnQQ1yIwbmB4Om9p0CXUsImyNTFBYpTdnkZKl"}, PasswordHash: "!", NodeGroups: []string{"b"}}}
	in.NodeUsers = []*deckhousev1.NodeUser{user}
	second := r.RenderAll(in)
	if !second["a"].Cached || second["b"].Cached {
		t.Fatalf("a NodeUser for b: cached a=%v b=%v, want only b re-rendered", second["a"].Cached, second["b"].Cached)
	}
	if second["b"].Published.Checksum == first["b"].Published.Checksum || second["a"].Published.Checksum != first["a"].Published.Checksum {
		t.Error("only b's checksum may change")
	}
	if !strings.Contains(second["b"].Published.Steps["001_node_users.sh"], "nu-user 'alice' 1100 ") {
		t.Error("b's node-users step does not make alice")
	}
	bad := user.DeepCopy()
	bad.Spec.UID = 0
	in.NodeUsers = []*deckhousev1.NodeUser{bad}
	third := r.RenderAll(in)
	if third["a"].Published == nil || third["b"].Published != nil || len(third["b"].Failures) != 1 || !strings.Contains(third["b"].Failures[0].Error(), "NodeUser alice") {
		t.Errorf("a NodeUser with uid 0 must fail b only, naming it: a=%+v b=%+v", third["a"].Failures, third["b"].Failures)
	}
}
