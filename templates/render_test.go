package templates

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// builtinTree is the built-in template tree, loaded once for every test
// of the package: a Tree is read-only once loaded (the server renders one
// from many goroutines), and loading it under -race costs a tenth of a
// second that tests calling it per render paid each time.
func builtinTree(t testing.TB) *Tree {
	t.Helper()
	tree, err := loadBuiltinTree()
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

var loadBuiltinTree = sync.OnceValues(func() (*Tree, error) { return LoadTree(Builtin()) })

func workerContext(t testing.TB, mutate func(*deckhousev1.NodeGroup)) Context {
	t.Helper()
	ctx, err := newWorkerContext(mutate)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// newWorkerContext is the context of a static group "worker" with the
// default cluster configuration, changed by mutate.
func newWorkerContext(mutate func(*deckhousev1.NodeGroup)) (Context, error) {
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	if mutate != nil {
		mutate(ng)
	}
	settings, err := ParseClusterConfiguration(nil)
	if err != nil {
		return Context{}, err
	}
	return NewContext(ng, settings, []string{"10.0.0.1:6443"}, testCA)
}

func mustRender(t testing.TB, tree *Tree, ctx Context, custom ...CustomStep) *Bundle {
	t.Helper()
	b, failures := tree.Render(&ctx, custom)
	if failures != nil {
		t.Fatalf("render: %v", failures)
	}
	return b
}

func TestCustomStepFileNames(t *testing.T) {
	cases := map[string]CustomStep{
		"005_a.sh":       {Name: "a.sh", Weight: 5},
		"100_motd.sh":    {Name: "motd", Weight: 100},
		"999_last.sh":    {Name: "last.sh", Weight: 999},
		"000_first-x.sh": {Name: "first-x", Weight: 0},
		"042_my.step.sh": {Name: "my.step", Weight: 42},
	}
	for want, s := range cases {
		if got := s.FileName(); got != want {
			t.Errorf("%+v: file name %q, want %q", s, got, want)
		}
	}
}

func TestCustomStepsAreOrderedAmongBuiltins(t *testing.T) {
	tree := builtinTree(t)
	b := mustRender(t, tree, workerContext(t, nil),
		CustomStep{Name: "late.sh", Weight: 999, Content: "true"},
		CustomStep{Name: "early", Weight: 5, Content: "true"},
		CustomStep{Name: "middle.sh", Weight: 50, Content: "true"})
	var names []string
	for name := range b.Steps {
		names = append(names, name)
	}
	slices.Sort(names)
	want := []string{"000_preflight.sh", "001_node_users.sh", "005_bashible_units.sh", "005_early.sh", "010_node_identity.sh",
		"015_kernel.sh", "017_fencing_watchdog.sh", "020_proxy_and_ca.sh", "030_base_packages.sh", "035_logging.sh", "040_containerd.sh", "050_kubernetes_binaries.sh",
		"050_middle.sh", "055_api_proxy.sh", "060_kubelet.sh", "070_static_node_cleanup.sh", "099_reboot.sh", "999_late.sh"}
	if !slices.Equal(names, want) {
		t.Fatalf("steps in order: %v, want %v", names, want)
	}
}

func TestBrokenCustomStepsAreAttributedAndNothingIsServed(t *testing.T) {
	tree := builtinTree(t)
	ctx := workerContext(t, nil)
	good := CustomStep{Name: "good.sh", Weight: 20, Content: "echo {{ .nodeGroup.name }}"}
	cases := []struct {
		step    CustomStep
		wantMsg string
	}{
		{CustomStep{Name: "parse.sh", Weight: 30, Content: "echo\n{{ if }}"}, "line 2"},
		{CustomStep{Name: "missing.sh", Weight: 30, Content: "{{ .nodeGroup.nope }}"}, `no entry for key "nope"`},
		{CustomStep{Name: "fail.sh", Weight: 30, Content: `{{ fail "not here" }}`}, "not here"},
		{CustomStep{Name: "kernel.sh", Weight: 15, Content: "true"}, "built-in step"},
		{CustomStep{Name: "heavy.sh", Weight: 1000, Content: "true"}, "outside 0..999"},
	}
	for _, tc := range cases {
		b, failures := tree.Render(&ctx, []CustomStep{good, tc.step})
		if b != nil {
			t.Errorf("%s: a bundle was returned despite the failure", tc.step.Name)
		}
		if len(failures) != 1 || failures[0].Custom != tc.step.Name || !strings.Contains(failures[0].Error(), tc.wantMsg) {
			t.Errorf("%s: failures %v, want one attributed to it mentioning %q", tc.step.Name, failures, tc.wantMsg)
		}
	}
	// Two NodeGroupConfigurations that map to one file: the later name is at fault.
	_, failures := tree.Render(&ctx, []CustomStep{{Name: "dup", Weight: 7, Content: "true"}, {Name: "dup.sh", Weight: 7, Content: "true"}})
	if len(failures) != 1 || failures[0].Custom != "dup.sh" {
		t.Errorf("collision between two custom steps: %v", failures)
	}
}

func TestBundleHeaderLimitsStepsToTheirBundles(t *testing.T) {
	tree := builtinTree(t)
	b := mustRender(t, tree, workerContext(t, nil),
		CustomStep{Name: "deb", Weight: 20, Bundles: []string{"debian", "ubuntu-lts"}, Content: "echo deb-ran\n"},
		CustomStep{Name: "all", Weight: 21, Bundles: []string{"*"}, Content: "echo all-ran\n"})
	if strings.Contains(b.Steps["021_all.sh"], "BASHIBLE_BUNDLE") {
		t.Error(`a step for "*" must not carry a bundle check`)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "deb.sh")
	if err := os.WriteFile(script, []byte(b.Steps["020_deb.sh"]), 0o600); err != nil {
		t.Fatal(err)
	}
	for bundle, want := range map[string]string{"debian": "deb-ran", "ubuntu-lts": "deb-ran", "centos": "step skipped"} {
		out := runBash(t, script, "BASHIBLE_BUNDLE="+bundle)
		if !strings.Contains(out, want) {
			t.Errorf("bundle %s: output %q, want %q", bundle, out, want)
		}
	}
}

func TestChecksumIsDeterministicAndCoversEverythingNodesReceive(t *testing.T) {
	tree := builtinTree(t)
	labels := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		labels["example.com/"+k] = k
	}
	withLabels := func(ng *deckhousev1.NodeGroup) {
		ng.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Labels: labels}
	}
	custom := []CustomStep{{Name: "x.sh", Weight: 20, Content: "{{ range $k, $v := .nodeGroup.nodeTemplate.labels }}{{ $k }}={{ $v }} {{ end }}"}}
	first := mustRender(t, tree, workerContext(t, withLabels), custom...).Checksum
	for range 20 { // map iteration order differs run to run
		if got := mustRender(t, tree, workerContext(t, withLabels), custom...).Checksum; got != first {
			t.Fatalf("checksum changed between identical renders: %s vs %s", first, got)
		}
	}
	maxPods := mustRender(t, tree, workerContext(t, func(ng *deckhousev1.NodeGroup) {
		withLabels(ng)
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptrTo[int32](77)}
	}), custom...).Checksum
	if maxPods == first {
		t.Error("changing maxPods must change the checksum")
	}

	// Scaling counters are not part of what nodes receive.
	cloud := func(min, max int32) func(*deckhousev1.NodeGroup) {
		return func(ng *deckhousev1.NodeGroup) {
			ng.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
			ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{
				ClassReference: deckhousev1.ClassReference{Kind: "K", Name: "n"}, MinPerZone: min, MaxPerZone: max,
				Zones: []string{"z" + string(rune('a'+min))},
			}
		}
	}
	if a, b := mustRender(t, tree, workerContext(t, cloud(1, 3))).Checksum, mustRender(t, tree, workerContext(t, cloud(2, 9))).Checksum; a != b {
		t.Error("changing cloudInstances counters or zones must not change the checksum")
	}

	// Length prefixes keep differently split content apart.
	if Checksum("ab", map[string]string{"c": "d"}) == Checksum("a", map[string]string{"bc": "d"}) {
		t.Error("checksum is ambiguous across field boundaries")
	}
}

func TestOverlayReplacesAndRemovesFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "steps"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"steps/015_kernel.sh.tpl":  "",                                     // removed
		"steps/060_kubelet.sh.tpl": "echo overlay {{ .nodeGroup.name }}\n", // replaced
		"steps/075_extra.sh.tpl":   "echo extra\n",                         // added
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tree, err := LoadTree(Overlay(Builtin(), dir))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"000_preflight.sh", "001_node_users.sh", "005_bashible_units.sh", "010_node_identity.sh",
		"017_fencing_watchdog.sh", "020_proxy_and_ca.sh", "030_base_packages.sh", "035_logging.sh", "040_containerd.sh", "050_kubernetes_binaries.sh", "055_api_proxy.sh",
		"060_kubelet.sh", "070_static_node_cleanup.sh", "075_extra.sh", "099_reboot.sh"}
	if got := tree.StepNames(); !slices.Equal(got, want) {
		t.Fatalf("overlay steps: %v", got)
	}
	b := mustRender(t, tree, workerContext(t, nil))
	if b.Steps["060_kubelet.sh"] != "echo overlay worker\n" {
		t.Errorf("overlaid step rendered %q", b.Steps["060_kubelet.sh"])
	}
	if tree.Digest() == builtinTree(t).Digest() {
		t.Error("an overlay must change the tree digest")
	}
	if err := os.WriteFile(filepath.Join(dir, "steps", "bad name.sh.tpl"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTree(Overlay(Builtin(), dir)); err == nil || !strings.Contains(err.Error(), "bad name.sh.tpl") {
		t.Fatalf("a badly named step must be refused naming the file, got %v", err)
	}
}

// TestOneSettingChangesOnlyItsStep: a group setting reaches only the step
// that uses it (and so the checksum), and a scaling counter reaches nothing.
func TestOneSettingChangesOnlyItsStep(t *testing.T) {
	tree := builtinTree(t)
	cloud := func(maxPerZone int32, maxPods *int32) func(*deckhousev1.NodeGroup) {
		return func(ng *deckhousev1.NodeGroup) {
			ng.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
			ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{
				ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "large"}, MinPerZone: 1, MaxPerZone: maxPerZone,
			}
			if maxPods != nil {
				ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: maxPods}
			}
		}
	}
	base := mustRender(t, tree, workerContext(t, cloud(3, nil)))

	scaled := mustRender(t, tree, workerContext(t, cloud(30, nil)))
	if scaled.Checksum != base.Checksum || scaled.Bashible != base.Bashible || scaled.Bootstrap != base.Bootstrap || !maps.Equal(scaled.Steps, base.Steps) {
		t.Error("changing cloudInstances.maxPerZone must change nothing nodes receive")
	}

	morePods := mustRender(t, tree, workerContext(t, cloud(3, ptrTo[int32](200))))
	if morePods.Checksum == base.Checksum {
		t.Error("changing maxPods must change the checksum")
	}
	if morePods.Bashible != base.Bashible || morePods.Bootstrap != base.Bootstrap {
		t.Error("changing maxPods must not change bashible.sh or the bootstrap script")
	}
	var changed []string
	for name := range base.Steps {
		if morePods.Steps[name] != base.Steps[name] {
			changed = append(changed, name)
		}
	}
	if !slices.Equal(changed, []string{"060_kubelet.sh"}) || len(morePods.Steps) != len(base.Steps) {
		t.Errorf("changing maxPods changed steps %v, want only 060_kubelet.sh", changed)
	}
	if !strings.Contains(morePods.Steps["060_kubelet.sh"], "\nmaxPods: 200\n") {
		t.Error("the kubelet step should carry maxPods: 200")
	}
}

func ptrTo[T any](v T) *T { return &v }

func workerGroupForFuzz() *deckhousev1.NodeGroup {
	return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: deckhousev1.NodeGroupSpec{
		NodeType:     deckhousev1.NodeTypeStatic,
		NodeTemplate: &deckhousev1.NodeTemplate{Labels: map[string]string{"a": "1", "b": "2"}},
	}}
}

// Update approval is not a step: bashible.sh asks for it before the first
// step, so a custom step of weight 0, whatever its name, runs approved.
func TestAWeightZeroStepRunsAfterUpdateApproval(t *testing.T) {
	tree := builtinTree(t)
	b := mustRender(t, tree, workerContext(t, nil),
		CustomStep{Name: "0-early", Weight: 0, Content: "true"},
		CustomStep{Name: "a", Weight: 1, Content: "true"})
	for name, content := range b.Steps {
		if strings.Contains(content, "bb-wait-for-update-approval") || strings.Contains(content, deckhousev1.WaitingForApprovalAnnotation) {
			t.Errorf("step %s asks for update approval: approval must come before every step, not be one", name)
		}
	}
	approval := strings.Index(b.Bashible, "\n    bb-wait-for-update-approval\n")
	steps := strings.Index(b.Bashible, `for step in "$BASHIBLE_DIR"/bundle_steps/*; do`)
	if approval < 0 || steps < 0 || approval > steps {
		t.Errorf("bashible.sh must ask for update approval (at %d) before it runs the first step (at %d)", approval, steps)
	}
}
