package templates

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func mustEngine(t *testing.T, library map[string]string) *Engine {
	t.Helper()
	e, err := NewEngine(library)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEngineFunctions(t *testing.T) {
	e := mustEngine(t, map[string]string{"lib/_x.tpl": `{{ define "greet" }}hello {{ .name }}{{ end }}`})
	data := map[string]any{"name": "worker", "list": []any{"a", "b"}, "obj": map[string]any{"k": "v", "n": 1}}
	cases := map[string]string{
		`{{ .name | upper }}`:                     "WORKER",
		`{{ .obj | toYaml }}`:                     "k: v\n\"n\": 1",
		`{{ .obj | toJson }}`:                     `{"k":"v","n":1}`,
		`{{ (fromYaml "a: 1").a }}`:               "1",
		`{{ (fromJson "{\"a\": \"x\"}").a }}`:     "x",
		`{{ .obj | toToml }}`:                     "k = \"v\"\nn = 1\n",
		`{{ tpl "{{ .name }}-tpl" . }}`:           "worker-tpl",
		`{{ include "greet" . }}`:                 "hello worker",
		`{{ include "greet" . | upper }}`:         "HELLO WORKER",
		`{{ required "name is needed" .name }}`:   "worker",
		`{{ .list | join "," }}`:                  "a,b",
		`{{ if hasKey .obj "k" }}yes{{ end }}`:    "yes",
		`{{ dig "missing" "x" "fallback" .obj }}`: "fallback",
	}
	for text, want := range cases {
		got, err := e.Render("t", text, data)
		if err != nil {
			t.Errorf("%s: %v", text, err)
			continue
		}
		if got != want {
			t.Errorf("%s = %q, want %q", text, got, want)
		}
	}
}

func TestEngineErrorsNameTemplateAndLine(t *testing.T) {
	e := mustEngine(t, map[string]string{"lib/_x.tpl": "{{ define \"broken\" }}\n{{ .absent }}{{ end }}"})
	data := map[string]any{"nodeGroup": map[string]any{"name": "w"}}
	cases := []struct {
		text, wantTemplate string
		wantLine           int
		wantMsg            string
	}{
		{"line one\n{{ .nodeGroup.nmae }}", "step.sh", 2, `map has no entry for key "nmae"`},
		{"\n\n{{ if }}", "step.sh", 3, "missing value for if"},
		{"{{ fail \"not on this group\" }}", "step.sh", 1, "not on this group"},
		{"{{ required \"set .x\" .nodeGroup.x }}", "step.sh", 1, `map has no entry for key "x"`},
		{"{{ required \"name must not be empty\" \"\" }}", "step.sh", 1, "name must not be empty"},
		{"{{ env \"HOME\" }}", "step.sh", 1, `function "env" not defined`},
		{"{{ expandenv \"$HOME\" }}", "step.sh", 1, `function "expandenv" not defined`},
		{"{{ include \"broken\" . }}", "lib/_x.tpl", 2, `map has no entry for key "absent"`},
		{"{{ fromYaml \"a: [\" }}", "step.sh", 1, "fromYaml"},
	}
	for _, tc := range cases {
		out, err := e.Render("step.sh", tc.text, data)
		var re *RenderError
		if !errors.As(err, &re) {
			t.Errorf("%q: want a RenderError, got %q, %v", tc.text, out, err)
			continue
		}
		if re.Template != tc.wantTemplate || re.Line != tc.wantLine || !strings.Contains(re.Message, tc.wantMsg) {
			t.Errorf("%q: got template %q line %d message %q; want %q line %d containing %q",
				tc.text, re.Template, re.Line, re.Message, tc.wantTemplate, tc.wantLine, tc.wantMsg)
		}
		if strings.Contains(out, "<no value>") {
			t.Errorf("%q rendered <no value>", tc.text)
		}
	}
}

func TestEngineLibraryParseErrorNamesTheFile(t *testing.T) {
	_, err := NewEngine(map[string]string{"lib/_bad.tpl": "{{ define \"x\" }}\n{{ end"})
	var re *RenderError
	if !errors.As(err, &re) || re.Template != "lib/_bad.tpl" || re.Line != 2 {
		t.Fatalf("want a RenderError for lib/_bad.tpl line 2, got %v", err)
	}
}

// The budgets (depth, iterations, output), not the clock, stop a costly
// template: the timeout is set far away, so a template that only the
// timeout stopped fails the test by its message, however busy the machine.
func TestEngineBoundsCostlyTemplates(t *testing.T) {
	e := mustEngine(t, nil)
	e.Timeout = 2 * time.Minute
	for _, text := range []string{
		`{{ range until 100000000 }}x{{ end }}`,
		`{{ range untilStep 0 1000000000 1 }}x{{ end }}`,
		`{{ seq 1000000000 }}`,
		`{{ repeat 1000000000 "abc" }}`,
		`{{ range until 99999 }}{{ repeat 100 "x" }}{{ end }}`,
		`{{ define "loop" }}{{ template "loop" . }}{{ end }}{{ template "loop" . }}`,
	} {
		out, err := e.Render("costly", text, nil)
		if err == nil {
			t.Errorf("%s: rendered %d bytes, want an error", text, len(out))
		} else if strings.Contains(err.Error(), "was abandoned") {
			t.Errorf("%s: only the timeout stopped it: %v", text, err)
		}
	}
	if out, err := e.Render("ok", `{{ range until 3 }}{{ . }}{{ end }}{{ repeat 2 "ab" }}{{ seq 3 }}`, nil); err != nil || out != "012abab1 2 3" {
		t.Errorf("small sequences: %q, %v", out, err)
	}
}

func TestRangeOverAnIntegerIsBoundedLikeSequences(t *testing.T) {
	e := mustEngine(t, nil)
	start := time.Now()
	_, err := e.Render("bomb", `{{ range 100000000000 }}{{ end }}`, nil)
	var re *RenderError
	if !errors.As(err, &re) || re.Line != 1 || re.Message != "range over 100000000000: more than 100000 iterations" {
		t.Errorf("range over 1e11: want a RenderError on line 1 saying more than 100000 iterations, got %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("range over 1e11 was refused only after %s", d)
	}
	data := map[string]any{"null": nil, "list": []any{"a", "b"}, "n": 2}
	for text, want := range map[string]string{
		`{{ range 3 }}{{ . }}{{ end }}`:                                  "012",
		`{{ range $i := .n }}{{ $i }}{{ end }}`:                          "01",
		`{{ range $i, $v := .list }}{{ $i }}{{ $v }}{{ end }}`:           "0a1b",
		`{{ range .null }}x{{ else }}empty{{ end }}`:                     "empty",
		`{{ range until 2 }}{{ range $.list }}{{ . }}{{ end }}{{ end }}`: "abab",
	} {
		if got, err := e.Render("ok", text, data); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", text, got, err, want)
		}
	}
}

// processCPU is the CPU time this test process has used so far.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestLoopsThatWriteNothingStopAtTheDeadline(t *testing.T) {
	e := mustEngine(t, nil)
	e.Timeout = 300 * time.Millisecond
	for _, text := range []string{
		`{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}`,
		`{{ range 100000 }}{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}{{ end }}`,
		// Recursion that doubles at every level, with no range at all.
		`{{ define "t" }}{{ if lt (len .) 60 }}{{ template "t" (append . 1) }}{{ template "t" (append . 1) }}{{ end }}{{ end }}{{ template "t" list }}`,
	} {
		if _, err := e.Render("spin", text, nil); err == nil {
			t.Errorf("%s rendered", text)
			continue
		}
		// The render must really stop, not go on burning a core after
		// Render gave up on it.
		time.Sleep(100 * time.Millisecond)
		before := processCPU(t)
		time.Sleep(time.Second)
		if used := processCPU(t) - before; used > 250*time.Millisecond {
			t.Errorf("%s: the process used %s of CPU in the second after the render failed", text, used)
		}
	}
}

// A text is parsed once and its parsed set reused (compiled.go); every
// render must still behave as on a fresh clone of the library: with its
// own data and its own budget, and unaffected by what other texts define.
func TestEngineReusesAParsedTextAsIfFresh(t *testing.T) {
	e := mustEngine(t, map[string]string{"lib/_x.tpl": `{{ define "greet" }}hello {{ .name }}{{ end }}`})
	// A text that redefines the library's template uses its own definition,
	// and another text still gets the library's, before and after.
	redefines := `{{ define "greet" }}HIJACKED{{ end }}{{ include "greet" . }}`
	plain := `{{ include "greet" . }}`
	for range 3 {
		if got, err := e.Render("plain", plain, map[string]any{"name": "a"}); err != nil || got != "hello a" {
			t.Fatalf("plain = %q, %v; want %q", got, err, "hello a")
		}
		if got, err := e.Render("redefines", redefines, nil); err != nil || got != "HIJACKED" {
			t.Fatalf("redefines = %q, %v; want HIJACKED", got, err)
		}
	}
	// The same text under another name is its own template: errors name it.
	if _, err := e.Render("other", `{{ .missing.x }}`, map[string]any{}); err == nil || !strings.Contains(err.Error(), "other") {
		t.Errorf("error %v does not name the template", err)
	}
	// A render that used up its budget leaves none of it to the next.
	big := `{{ range until .n }}{{ repeat 100000 "x" }}{{ end }}`
	if _, err := e.Render("big", big, map[string]any{"n": 100}); err == nil {
		t.Fatal("10 MB of output rendered, want the output limit")
	}
	if out, err := e.Render("big", big, map[string]any{"n": 2}); err != nil || len(out) != 200000 {
		t.Fatalf("a small render of the same text: %d bytes, %v", len(out), err)
	}
	// Renders of one text at once, nesting tpl of the same text, each
	// write their own data.
	nested := `{{ .name }}{{ if .inner }}:{{ tpl "{{ .name }}" (dict "name" (print .name "-inner")) }}{{ end }}`
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			name := fmt.Sprintf("n%d", i)
			for range 20 {
				got, err := e.Render("nested", nested, map[string]any{"name": name, "inner": true})
				if want := name + ":" + name + "-inner"; err != nil || got != want {
					t.Errorf("nested = %q, %v; want %q", got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// The index of parsed texts forgets old texts before it keeps more than
// maxCompiledTexts of them or maxCompiledBytes in all.
func TestParsedTextsAreBounded(t *testing.T) {
	var s compiledSets
	big := strings.Repeat("x", 1<<20)
	for i := range 3 * maxCompiledBytes >> 20 {
		s.get(compiledKey{fmt.Sprint(i), big})
		if s.bytes > maxCompiledBytes {
			t.Fatalf("after %d texts of 1 MiB the index holds %d bytes", i+1, s.bytes)
		}
	}
	for i := range 3 * maxCompiledTexts {
		s.get(compiledKey{fmt.Sprint(i), "small"})
		if len(s.texts) > maxCompiledTexts {
			t.Fatalf("after %d texts the index holds %d", i+1, len(s.texts))
		}
	}
	if p, _ := s.get(compiledKey{"a", "small"}); p != s.texts[compiledKey{"a", "small"}] {
		t.Error("one text got two entries")
	}
}

// A text's idle set outlives garbage collections: a full render collects
// several times, and a set left only to a sync.Pool was parsed again after
// each.
func TestAnIdleParsedSetSurvivesCollections(t *testing.T) {
	e := mustEngine(t, nil)
	k := compiledKey{"step", "{{ .x }}"}
	c, release, err := e.acquire(k.name, k.text)
	if err != nil {
		t.Fatal(err)
	}
	release()
	runtime.GC()
	runtime.GC()
	again, release, err := e.acquire(k.name, k.text)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if again != c {
		t.Error("the text was parsed again after two collections")
	}
	// A second render at once gets a set of its own.
	other, releaseOther, err := e.acquire(k.name, k.text)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseOther()
	if other == again {
		t.Error("two renders at once share a parsed set")
	}
}
