package bundles

import (
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/procstat"
	"github.com/node-manager/node-manager/templates"
	"github.com/node-manager/node-manager/templates/sandbox"
)

// Template bombs a NodeGroupConfiguration author can write.
const (
	rangeBomb = `{{ range 100000000000 }}{{ end }}`
	// One action of many RSA key generations: no loop, so nothing in the
	// engine checks the deadline until the action ends.
	spinBomb = `{{ list` + spinArgs + ` }}`
	spinArgs = ` (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa")` +
		` (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa")` +
		` (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa") (genPrivateKey "rsa")`
	// Every step stays under the output limit; all of it is 4 GB.
	memoryBomb = `{{ $l := list }}{{ range until 1000 }}{{ $l = append $l (repeat 4000000 "x") }}{{ end }}`
)

// sandboxedRenderer renders NodeGroupConfigurations in workers that are
// this test binary.
func sandboxedRenderer(t *testing.T, timeout time.Duration, memory int64) *Renderer {
	t.Helper()
	r, _ := timedSandboxedRenderer(t, timeout, memory)
	return r
}

// timedSandboxedRenderer is sandboxedRenderer, and the sandbox's clock:
// when each NodeGroupConfiguration's render in it started and ended.
func timedSandboxedRenderer(t *testing.T, timeout time.Duration, memory int64) (*Renderer, *timedSandbox) {
	t.Helper()
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := sandbox.New(sandbox.Config{Library: tree.Library(), Workers: 2, Timeout: timeout, Memory: memory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	timed := &timedSandbox{Untrusted: pool}
	return NewRenderer(tree.WithSandbox(timed)), timed
}

// timedSandbox records the renders of the sandbox it wraps, so a test can
// tell how long a template took apart from the built-in templates
// rendered around it, and what happened before a render ended.
type timedSandbox struct {
	templates.Untrusted
	mu      sync.Mutex
	renders []sandboxRender
}

// sandboxRender is one finished render of text, named name.
type sandboxRender struct {
	name, text string
	start, end time.Time
	// values is the first byte of the values' encoding: renders given
	// the same encoding have the same one.
	values *byte
}

func (s *timedSandbox) RenderJSON(texts []templates.NamedText, values []byte) ([]string, []error) {
	var outs []string
	var errs []error
	// One by one, to time each; the pool's own batching is its tests'.
	for _, t := range texts {
		start := time.Now()
		o, e := s.Untrusted.RenderJSON([]templates.NamedText{t}, values)
		s.mu.Lock()
		s.renders = append(s.renders, sandboxRender{name: t.Name, text: t.Text, start: start, end: time.Now(), values: unsafe.SliceData(values)})
		s.mu.Unlock()
		outs, errs = append(outs, o...), append(errs, e...)
	}
	return outs, errs
}

// Took is how long the last render of the template name took; false
// when the sandbox never rendered it.
func (s *timedSandbox) Took(name string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.renders) - 1; i >= 0; i-- {
		if r := s.renders[i]; r.name == name {
			return r.end.Sub(r.start), true
		}
	}
	return 0, false
}

// Ended is when the first render of text ended; false while none has.
func (s *timedSandbox) Ended(text string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.renders {
		if r.text == text {
			return r.end, true
		}
	}
	return time.Time{}, false
}

func TestTemplateBombsFailWithinTheirDeadlineAndLeaveNoCPUBurning(t *testing.T) {
	const timeout = 2 * time.Second
	r, sandboxed := timedSandboxedRenderer(t, timeout, 64<<20)
	for name, bomb := range map[string]string{"range.sh": rangeBomb, "spin.sh": spinBomb} {
		t.Run(name, func(t *testing.T) {
			in := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a"), group("b")},
				Configs: []*deckhousev1alpha1.NodeGroupConfiguration{config(name, []string{"a"}, bomb), config("fine.sh", []string{"*"}, "echo fine")}}
			start := time.Now()
			res := r.RenderAll(in)
			all := time.Since(start)
			if a := res["a"]; a.Published != nil || len(a.Failures) != 1 || a.Failures[0].Custom != name {
				t.Fatalf("group a: want one failure of %s, got %+v", name, a.Failures)
			}
			// The bomb's own render: group a's fine.sh (sorted first)
			// started the worker, so this is the bomb and its stop, not a
			// worker's start nor the built-in templates of both groups,
			// which a loaded machine slows by seconds.
			took, ok := sandboxed.Took("NodeGroupConfiguration/" + name)
			if !ok {
				t.Fatalf("%s never reached the sandbox", name)
			}
			t.Logf("%s failed after %s (all groups rendered in %s): %v", name, took, all, res["a"].Failures[0])
			if took > timeout+3*time.Second {
				t.Errorf("the render failed only after %s", took)
			}
			if res["b"].Published == nil {
				t.Errorf("group b: %v", res["b"].Failures)
			}
			time.Sleep(200 * time.Millisecond)
			before := procstat.TreeCPU(os.Getpid())
			time.Sleep(2 * time.Second)
			used := procstat.TreeCPU(os.Getpid()) - before
			t.Logf("CPU used by the process and its workers in the 2s after: %s", used)
			if used > 300*time.Millisecond {
				t.Errorf("the server and its workers used %s of CPU in the 2s after the render failed", used)
			}
		})
	}
}

// A group's NodeGroupConfigurations go to the sandbox with one encoding of
// the group's context, made once: encoding it for each of them was most
// of what the sandbox cost a full render.
func TestAGroupsConfigurationsShareOneEncodingOfItsContext(t *testing.T) {
	r, sandboxed := timedSandboxedRenderer(t, 10*time.Second, 64<<20)
	in := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a"), group("b")},
		Configs: []*deckhousev1alpha1.NodeGroupConfiguration{
			config("one.sh", []string{"*"}, "echo {{ .nodeGroup.name }}"),
			config("two.sh", []string{"*"}, "echo two {{ .kubernetesVersion }}"),
			config("three.sh", []string{"*"}, "echo three {{ .kubernetesVersion }}")}}
	for g, res := range r.RenderAll(in) {
		if res.Published == nil {
			t.Fatalf("group %s: %v", g, res.Failures)
		}
		if got := res.Published.Steps["050_one.sh"]; !strings.Contains(got, "echo "+g) {
			t.Errorf("group %s: one.sh rendered %q, want its own group's name", g, got)
		}
	}
	encodings := map[*byte]bool{}
	for _, render := range sandboxed.renders {
		encodings[render.values] = true
	}
	if len(sandboxed.renders) != 6 || len(encodings) != 2 {
		t.Errorf("%d renders in the sandbox with %d encodings of the context; want 6 with 2, one per group", len(sandboxed.renders), len(encodings))
	}
}

func TestAMemoryBombIsStoppedAtTheWorkerLimitAndTheServerDoesNotGrow(t *testing.T) {
	r := sandboxedRenderer(t, 10*time.Second, 64<<20)
	in := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a")},
		Configs: []*deckhousev1alpha1.NodeGroupConfiguration{config("fine.sh", []string{"a"}, "echo fine")}}
	if res := r.RenderAll(in); res["a"].Published == nil {
		t.Fatal(res["a"].Failures)
	}
	before := procstat.MustResident(t, os.Getpid())
	in.Configs = append(in.Configs, config("mem.sh", []string{"a"}, memoryBomb))
	res := r.RenderAll(in)
	grew := procstat.MustResident(t, os.Getpid()) - before
	t.Logf("failures %v; resident memory grew by %.1f MiB", res["a"].Failures, float64(grew)/(1<<20))
	want := "NodeGroupConfiguration mem.sh: template NodeGroupConfiguration/mem.sh: rendering used more than 64 MiB and was stopped"
	if a := res["a"]; a.Published != nil || len(a.Failures) != 1 || a.Failures[0].Error() != want {
		t.Fatalf("want %q, got %+v", want, a.Failures)
	}
	if grew > 16<<20 {
		t.Errorf("the server grew by %d MiB", grew>>20)
	}
}

// After a change of NodeGroupConfigurations alone, a group renders only
// the changed ones: the others and the built-in templates are taken from
// its last good render, and the bundle is the one a whole render gives.
// A change of the render context renders everything again.
func TestAConfigurationChangeRendersOnlyThatConfiguration(t *testing.T) {
	r, sandboxed := timedSandboxedRenderer(t, 10*time.Second, 64<<20)
	in := Inputs{NodeGroups: []*deckhousev1.NodeGroup{group("a")},
		Configs: []*deckhousev1alpha1.NodeGroupConfiguration{
			config("one.sh", []string{"*"}, "echo {{ .nodeGroup.name }}"),
			config("two.sh", []string{"*"}, "echo two {{ .kubernetesVersion }}")}}
	if res := r.Render(group("a"), in); res.Published == nil {
		t.Fatal(res.Failures)
	}
	changed := Inputs{NodeGroups: in.NodeGroups, Configs: []*deckhousev1alpha1.NodeGroupConfiguration{
		in.Configs[0], config("two.sh", []string{"*"}, "echo changed {{ .kubernetesVersion }}")}}
	sandboxed.mu.Lock()
	sandboxed.renders = nil
	sandboxed.mu.Unlock()
	res := r.Render(group("a"), changed)
	whole := sandboxedRenderer(t, 10*time.Second, 64<<20).Render(group("a"), changed)
	if res.Published == nil || whole.Published == nil || res.Published.Checksum != whole.Published.Checksum ||
		!maps.Equal(res.Published.Steps, whole.Published.Steps) || res.Published.Bootstrap != whole.Published.Bootstrap {
		t.Fatalf("after a configuration change: %+v; want the whole render %+v", res, whole)
	}
	sandboxed.mu.Lock()
	var names []string
	for _, x := range sandboxed.renders {
		names = append(names, x.name)
	}
	sandboxed.mu.Unlock()
	if !slices.Equal(names, []string{"NodeGroupConfiguration/two.sh"}) {
		t.Errorf("the sandbox rendered %v; want only two.sh", names)
	}
	// Another render context (a label templates can read) renders both.
	labelled := group("a")
	labelled.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Labels: map[string]string{"x": "y"}}
	sandboxed.mu.Lock()
	sandboxed.renders = nil
	sandboxed.mu.Unlock()
	if res := r.Render(labelled, changed); res.Published == nil {
		t.Fatal(res.Failures)
	}
	sandboxed.mu.Lock()
	defer sandboxed.mu.Unlock()
	if len(sandboxed.renders) != 2 {
		t.Errorf("after a NodeGroup change the sandbox rendered %d configurations; want both", len(sandboxed.renders))
	}
}
