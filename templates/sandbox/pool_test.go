package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/procstat"
	"github.com/node-manager/node-manager/templates"
)

// The test binary is the worker: Pools in these tests re-execute it.
func TestMain(m *testing.M) {
	RunWorkerIfRequested()
	os.Exit(m.Run())
}

var library = map[string]string{"lib/_x.tpl": `{{ define "greet" }}hello {{ .name }}{{ end }}`}

func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	if cfg.Library == nil {
		cfg.Library = library
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestRendersWhatTheEngineRenders(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	engine, err := templates.NewEngine(library)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]any{"name": "worker", "n": 3.0, "list": []any{"a", "b"}}
	for _, text := range []string{
		`{{ include "greet" . }} {{ .n }} {{ .list | join "," }} {{ range 3 }}{{ . }}{{ end }}`,
		`{{ $_ := set . "name" "changed" }}{{ .name }}`,
		// The previous template's change is not seen by the next render.
		`{{ .name }}`,
		"line one\n{{ .nodeGroup }}",
		`{{ fail "no" }}`,
	} {
		want, wantErr := engine.Render("t", text, copyMap(data))
		got, err := p.Render("t", text, data)
		if got != want || errorText(err) != errorText(wantErr) {
			t.Errorf("%s: sandbox %q, %v; engine %q, %v", text, got, err, want, wantErr)
		}
	}
	if n := p.Started.Load(); n != 1 {
		t.Errorf("%d workers started for renders that all succeeded or failed cleanly, want 1 reused", n)
	}
}

func copyMap(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestAWorkerPastItsDeadlineIsKilled(t *testing.T) {
	// A worker that starts and then never answers.
	p := newPool(t, Config{Workers: 1, Timeout: 200 * time.Millisecond, Command: func() *exec.Cmd {
		return exec.Command("bash", "-c", `printf '\0\0\0\1\1'; exec sleep 60`)
	}})
	start := time.Now()
	_, err := p.Render("NodeGroupConfiguration/x.sh", "x", nil)
	var re *templates.RenderError
	if !errors.As(err, &re) || re.Template != "NodeGroupConfiguration/x.sh" || re.Message != "rendering took longer than 200ms and was stopped" {
		t.Fatalf("want a RenderError saying the render took too long, got %v", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond+killGrace+time.Second {
		t.Errorf("stopped after %s", d)
	}
}

func TestASpinningTemplateIsStoppedAndCostsNothingAfterwards(t *testing.T) {
	p := newPool(t, Config{Workers: 1, Timeout: time.Second})
	// One action of many RSA key generations: no loop, so no check of the
	// deadline between them; only the sandbox stops it.
	spin := "{{ list" + strings.Repeat(` (genPrivateKey "rsa")`, 200) + " }}"
	start := time.Now()
	_, err := p.Render("spin", spin, nil)
	if err == nil || !strings.Contains(err.Error(), "took longer than 1s") {
		t.Fatalf("want a timeout, got %v", err)
	}
	if d := time.Since(start); d > time.Second+killGrace+time.Second {
		t.Errorf("stopped after %s", d)
	}
	time.Sleep(200 * time.Millisecond)
	before := procstat.TreeCPU(os.Getpid())
	time.Sleep(time.Second)
	if used := procstat.TreeCPU(os.Getpid()) - before; used > 100*time.Millisecond {
		t.Errorf("this process and its workers used %s of CPU in the second after the render was stopped", used)
	}
	if out, err := p.Render("ok", "fine", nil); err != nil || out != "fine" {
		t.Errorf("the next render: %q, %v", out, err)
	}
}

func TestATemplateOverItsCPUTimeIsStopped(t *testing.T) {
	p := newPool(t, Config{Workers: 1, Timeout: time.Minute, CPU: time.Second})
	_, err := p.Render("spin", `{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`, nil)
	if err == nil || err.Error() != "template spin: rendering took more than 1s of CPU and was stopped" {
		t.Fatalf("want the CPU limit, got %v", err)
	}
}

func TestAMemoryBombKillsOnlyItsWorker(t *testing.T) {
	p := newPool(t, Config{Workers: 1, Memory: 128 << 20})
	if _, err := p.Render("warm", "{{ range 3 }}x{{ end }}", nil); err != nil {
		t.Fatal(err)
	}
	before := procstat.MustResident(t, os.Getpid())
	// Under MaxOutputBytes at every step, 4 GB in all.
	_, err := p.Render("bomb", `{{ $l := list }}{{ range until 1000 }}{{ $l = append $l (repeat 4000000 "x") }}{{ end }}`, nil)
	if err == nil || err.Error() != "template bomb: rendering used more than 128 MiB and was stopped" {
		t.Fatalf("want the memory limit, got %v", err)
	}
	if grew := procstat.MustResident(t, os.Getpid()) - before; grew > 16<<20 {
		t.Errorf("this process grew by %d MiB", grew>>20)
	}
	if out, err := p.Render("ok", "fine", nil); err != nil || out != "fine" {
		t.Errorf("the next render: %q, %v", out, err)
	}
}

// A group's templates are one request; each keeps its own limits, one
// that its worker is stopped for fails alone, and the ones after it render
// in a new worker, with the values and nothing a template before changed.
func TestABatchKeepsEachTemplatesLimitsAndFailures(t *testing.T) {
	p := newPool(t, Config{Workers: 1, Timeout: 10 * time.Second, CPU: time.Second, Memory: 128 << 20})
	texts := []templates.NamedText{
		{Name: "a", Text: `{{ include "greet" . }}`},
		{Name: "cpu", Text: `{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`},
		{Name: "b", Text: `{{ $_ := set . "name" "changed" }}{{ .name }}`},
		{Name: "memory", Text: `{{ $l := list }}{{ range until 1000 }}{{ $l = append $l (repeat 4000000 "x") }}{{ end }}`},
		{Name: "c", Text: `{{ .name }}`},
		{Name: "fails", Text: `{{ fail "no" }}`},
		{Name: "d", Text: `{{ range 2 }}d{{ end }}`},
	}
	outs, errs := p.RenderJSON(texts, []byte(`{"name":"batch"}`))
	want := map[string]string{"a": "hello batch", "b": "changed", "c": "batch", "d": "dd"}
	wantErr := map[string]string{
		"cpu":    "template cpu: rendering took more than 1s of CPU and was stopped",
		"memory": "template memory: rendering used more than 128 MiB and was stopped",
		"fails":  "template fails, line 1: <fail \"no\">: error calling fail: no",
	}
	for i, text := range texts {
		if outs[i] != want[text.Name] || errorText(errs[i]) != wantErr[text.Name] {
			t.Errorf("%s: %q, %v; want %q, %q", text.Name, outs[i], errs[i], want[text.Name], wantErr[text.Name])
		}
	}
	if n := p.Started.Load(); n != 3 {
		t.Errorf("%d workers started, want 3: the first, and one after each template a worker was stopped for", n)
	}
}

// A template past its deadline retires its worker; the rest of its
// request renders in a new one.
func TestATemplatePastItsDeadlineInABatchFailsAlone(t *testing.T) {
	p := newPool(t, Config{Workers: 1, Timeout: time.Second})
	spin := "{{ list" + strings.Repeat(` (genPrivateKey "rsa")`, 200) + " }}"
	outs, errs := p.RenderJSON([]templates.NamedText{{Name: "ok", Text: "one"}, {Name: "spin", Text: spin}, {Name: "after", Text: "two"}}, []byte(`{}`))
	if outs[0] != "one" || errs[0] != nil || outs[2] != "two" || errs[2] != nil {
		t.Errorf("the templates around the slow one: %q, %v; %q, %v", outs[0], errs[0], outs[2], errs[2])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "took longer than 1s") {
		t.Errorf("spin: want a timeout, got %v", errs[1])
	}
	if n := p.Started.Load(); n != 2 {
		t.Errorf("%d workers started, want 2", n)
	}
}

// TestAnIdleWorkerIsStoppedAfterTheIdleTimeout: a worker left idle for
// IdleTimeout is stopped (its process gone), and the next render starts a
// new one; with a negative timeout it stays.
func TestAnIdleWorkerIsStoppedAfterTheIdleTimeout(t *testing.T) {
	p := newPool(t, Config{Workers: 2, IdleTimeout: 200 * time.Millisecond})
	if out, err := p.Render("a", "{{ .name }}", map[string]any{"name": "x"}); err != nil || out != "x" {
		t.Fatalf("render: %q %v", out, err)
	}
	p.mu.Lock()
	var w *worker
	for live := range p.live {
		w = live
	}
	p.mu.Unlock()
	if p.Idle() != 1 || w == nil {
		t.Fatalf("after a render %d workers are idle, want 1", p.Idle())
	}
	exited := make(chan error, 1)
	go func() { exited <- w.wait() }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the idle worker's process still runs 30s after its 200ms idle timeout")
	}
	if p.Idle() != 0 {
		t.Errorf("%d workers idle after the timeout, want 0", p.Idle())
	}
	if out, err := p.Render("b", "{{ .name }}", map[string]any{"name": "y"}); err != nil || out != "y" || p.Started.Load() != 2 {
		t.Errorf("the next render: %q %v, %d workers started in all, want a second", out, err, p.Started.Load())
	}

	kept := newPool(t, Config{Workers: 1, IdleTimeout: -1})
	if _, err := kept.Render("a", "ok", nil); err != nil {
		t.Fatal(err)
	}
	kept.mu.Lock()
	reaper := kept.reaper
	kept.mu.Unlock()
	if reaper != nil || kept.Idle() != 1 {
		t.Errorf("with no idle timeout: reaper armed %v, %d idle; want the worker kept", reaper != nil, kept.Idle())
	}
}

// TestCheckLeavesNoWorkerRunning: the start-up check starts a worker and
// stops it, even with no idle timeout; the first render starts another.
func TestCheckLeavesNoWorkerRunning(t *testing.T) {
	p := newPool(t, Config{Workers: 2, IdleTimeout: -1})
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	live := len(p.live)
	p.mu.Unlock()
	if p.Started.Load() != 1 || p.Idle() != 0 || live != 0 {
		t.Errorf("after the check: %d workers started, %d idle, %d live; want 1 started and none left", p.Started.Load(), p.Idle(), live)
	}
	if out, err := p.Render("a", "{{ .name }}", map[string]any{"name": "x"}); err != nil || out != "x" || p.Started.Load() != 2 {
		t.Errorf("the first render: %q %v, %d workers started in all, want a second", out, err, p.Started.Load())
	}
}
