package templates

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

// Limits that keep any template, however written, bounded in time and
// output: a script is at most MaxOutputBytes, and sprig's sequence and
// repeat functions and range over an integer refuse counts above
// MaxSequence. Memory is not bounded in process: untrusted templates render
// in templates/sandbox, whose workers have a memory limit.
const (
	MaxOutputBytes = 4 << 20
	MaxSequence    = 100000
	MaxNesting     = 50
	DefaultTimeout = 10 * time.Second
)

// Engine renders templates with sprig's text functions (without env and
// expandenv: a template must not read the server's environment) plus toYaml,
// fromYaml, toJson, fromJson, toToml, tpl, include and required. A missing
// map key is an error naming the template and line, never "<no value>".
//
// Library templates (files whose names start with "_", holding only
// {{ define }} blocks) are parsed once and are available to every render
// through include and template.
type Engine struct {
	base    *template.Template
	library map[string]string
	// untrusted, when set, renders what RenderUntrusted is given.
	untrusted Untrusted
	// Timeout bounds one render; zero means DefaultTimeout.
	Timeout time.Duration
	// compiled pools the texts rendered so far (compiled.go); copies of
	// an engine share it, as they share base.
	compiled *compiledSets
}

// NewEngine returns an engine whose renders can use the named library
// templates (name → text).
func NewEngine(library map[string]string) (*Engine, error) {
	base := template.New("").Option("missingkey=error").Funcs(staticFuncs())
	// Placeholders so library texts that call include or tpl parse; each
	// render binds the real ones.
	base.Funcs(template.FuncMap{"include": noRender, "tpl": noRender, tickFunc: func() (string, error) { return "", nil }})
	for _, name := range slices.Sorted(maps.Keys(library)) {
		if _, err := base.New(name).Parse(library[name]); err != nil {
			return nil, newRenderError(name, err)
		}
	}
	guardLoops(base)
	return &Engine{base: base, library: maps.Clone(library), compiled: &compiledSets{}}, nil
}

func noRender(string, any) (string, error) {
	return "", errors.New("include and tpl work only while a template renders")
}

// Render executes the template text, named name in errors, with data.
//
// A render is bounded: include and tpl may nest at most MaxNesting deep,
// everything it writes (including what include and tpl produce) counts
// against MaxOutputBytes, range may not iterate over an integer above
// MaxSequence, and the deadline is checked on every loop iteration and
// template call even when nothing is written, so a render still running
// after Timeout stops at its next iteration and is reported as failed. A
// single function call that runs long (a sprig builtin) finishes in the
// background; the sandbox, not this engine, bounds what untrusted
// templates may spend.
func (e *Engine) Render(name, text string, data any) (string, error) {
	b := &budget{deadline: time.Now().Add(e.timeout())}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := e.render(name, text, data, b)
		done <- result{out, err}
	}()
	timer := time.NewTimer(e.timeout())
	defer timer.Stop()
	select {
	case r := <-done:
		return r.out, r.err
	case <-timer.C:
		return "", &RenderError{Template: name, Message: fmt.Sprintf("rendering took longer than %s and was abandoned", e.timeout())}
	}
}

func (e *Engine) timeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return DefaultTimeout
}

// budget is what one render, with everything it includes, may spend.
// A render runs on one goroutine, so it needs no lock.
type budget struct {
	depth    int
	bytes    int
	deadline time.Time
}

func (b *budget) enter(what string) error {
	b.depth++
	if b.depth > MaxNesting {
		return fmt.Errorf("%s: templates nest deeper than %d", what, MaxNesting)
	}
	if time.Now().After(b.deadline) {
		return fmt.Errorf("%s: the render ran out of time", what)
	}
	return nil
}

func (b *budget) leave() { b.depth-- }

// tick is called at the start of every range iteration and template call.
func (b *budget) tick() (string, error) {
	if time.Now().After(b.deadline) {
		return "", errors.New("the render ran out of time")
	}
	return "", nil
}

// Names of the functions guardLoops inserts; a template cannot gain
// anything by calling them itself.
const (
	tickFunc  = "_nodeManagerTick"
	rangeFunc = "_nodeManagerRange"
)

// guardLoops rewrites every template in t so that no loop escapes the
// render's budget: each range body and each template body starts with a
// call of tickFunc (which fails once the deadline has passed, even when the
// loop writes nothing), and each range pipeline ends in rangeFunc (which
// refuses to range over an integer above MaxSequence). It is idempotent,
// so trees shared with a parsed library are rewritten once and only read
// afterwards.
func guardLoops(t *template.Template) {
	for _, tmpl := range t.Templates() {
		if tmpl.Tree != nil && tmpl.Tree.Root != nil {
			guardList(tmpl.Tree, tmpl.Tree.Root)
		}
	}
}

func guardList(tree *parse.Tree, list *parse.ListNode) {
	if list == nil {
		return
	}
	if !startsWithTick(list) {
		list.Nodes = append([]parse.Node{tickAction(tree, list.Position())}, list.Nodes...)
	}
	for _, n := range list.Nodes {
		switch n := n.(type) {
		case *parse.RangeNode:
			guardRangePipe(tree, n.Pipe)
			guardList(tree, n.List)
			guardList(tree, n.ElseList)
		case *parse.IfNode:
			guardList(tree, n.List)
			guardList(tree, n.ElseList)
		case *parse.WithNode:
			guardList(tree, n.List)
			guardList(tree, n.ElseList)
		case *parse.ListNode:
			guardList(tree, n)
		}
	}
}

func isCallOf(cmd *parse.CommandNode, name string) bool {
	if len(cmd.Args) != 1 {
		return false
	}
	id, ok := cmd.Args[0].(*parse.IdentifierNode)
	return ok && id.Ident == name
}

func startsWithTick(list *parse.ListNode) bool {
	if len(list.Nodes) == 0 {
		return false
	}
	a, ok := list.Nodes[0].(*parse.ActionNode)
	return ok && a.Pipe != nil && len(a.Pipe.Cmds) == 1 && isCallOf(a.Pipe.Cmds[0], tickFunc)
}

// tickAction is {{ _nodeManagerTick }} at pos: it prints nothing.
func tickAction(tree *parse.Tree, pos parse.Pos) *parse.ActionNode {
	return &parse.ActionNode{NodeType: parse.NodeAction, Pos: pos, Line: 0,
		Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Pos: pos, Cmds: []*parse.CommandNode{call(tree, pos, tickFunc)}}}
}

func call(tree *parse.Tree, pos parse.Pos, name string) *parse.CommandNode {
	return &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos,
		Args: []parse.Node{parse.NewIdentifier(name).SetTree(tree).SetPos(pos)}}
}

func guardRangePipe(tree *parse.Tree, pipe *parse.PipeNode) {
	if pipe == nil || len(pipe.Cmds) == 0 || isCallOf(pipe.Cmds[len(pipe.Cmds)-1], rangeFunc) {
		return
	}
	pipe.Cmds = append(pipe.Cmds, call(tree, pipe.Position(), rangeFunc))
}

// rangeLimit passes what a range iterates over through unchanged, unless
// it is an integer above MaxSequence.
func rangeLimit(v any) (reflect.Value, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if rv.Int() > MaxSequence {
			return reflect.Value{}, fmt.Errorf("range over %d: more than %d iterations", rv.Int(), MaxSequence)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if rv.Uint() > MaxSequence {
			return reflect.Value{}, fmt.Errorf("range over %d: more than %d iterations", rv.Uint(), MaxSequence)
		}
	}
	return rv, nil
}

func (e *Engine) render(name, text string, data any, b *budget) (string, error) {
	c, release, err := e.acquire(name, text)
	if err != nil {
		return "", err
	}
	defer release()
	c.budget = b
	out := &limitedBuffer{budget: b}
	// The text's last output size: most renders of a text are about as
	// long, and growing the buffer by doubling copied each one several
	// times.
	out.buf.Grow(c.lastSize)
	if err := c.t.Execute(out, data); err != nil {
		return "", newRenderError(name, err)
	}
	c.lastSize = out.buf.Len()
	return out.buf.String(), nil
}

// limitedBuffer charges every write to the render's budget and fails once
// the render has written too much or run out of time, which stops it.
type limitedBuffer struct {
	buf    strings.Builder
	budget *budget
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.budget.bytes += len(p)
	if l.budget.bytes > MaxOutputBytes {
		return 0, fmt.Errorf("output is larger than %d bytes", MaxOutputBytes)
	}
	if time.Now().After(l.budget.deadline) {
		return 0, errors.New("the render ran out of time")
	}
	return l.buf.Write(p)
}

// staticFuncs are the functions that do not depend on the template being
// rendered.
func staticFuncs() template.FuncMap {
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = toJSON
	funcs["fromJson"] = fromJSON
	funcs["toToml"] = toTOML
	funcs["required"] = required
	funcs["index"] = strictIndex
	funcs["hasKey"] = hasKey
	funcs["squote"] = shellQuote
	funcs[rangeFunc] = rangeLimit
	// Bounded replacements for functions whose cost a template chooses.
	until, untilStep, seq, repeat := funcs["until"].(func(int) []int), funcs["untilStep"].(func(int, int, int) []int),
		funcs["seq"].(func(...int) string), funcs["repeat"].(func(int, string) string)
	funcs["until"] = func(n int) ([]int, error) {
		if n > MaxSequence || n < -MaxSequence {
			return nil, fmt.Errorf("until: %d is more than %d elements", n, MaxSequence)
		}
		return until(n), nil
	}
	funcs["untilStep"] = func(start, stop, step int) ([]int, error) {
		if step == 0 {
			return nil, errors.New("untilStep: step must not be 0")
		}
		// Float arithmetic cannot overflow the way int subtraction can.
		if math.Abs((float64(stop)-float64(start))/float64(step)) > MaxSequence {
			return nil, fmt.Errorf("untilStep: more than %d elements", MaxSequence)
		}
		return untilStep(start, stop, step), nil
	}
	funcs["seq"] = func(params ...int) (string, error) {
		lo, hi := 1, 0
		switch len(params) {
		case 1:
			hi = params[0]
		case 2, 3:
			lo, hi = params[0], params[len(params)-1]
		}
		if math.Abs(float64(hi)-float64(lo)) > MaxSequence {
			return "", fmt.Errorf("seq: more than %d elements", MaxSequence)
		}
		return seq(params...), nil
	}
	// String builders a template could double in a loop.
	for name, f := range map[string]func(...any) string{"print": fmt.Sprint, "println": fmt.Sprintln, "cat": funcs["cat"].(func(...any) string)} {
		funcs[name] = boundedString(name, f)
	}
	funcs["printf"] = func(format string, args ...any) (string, error) {
		return boundedString("printf", func(a ...any) string { return fmt.Sprintf(format, a...) })(args...)
	}
	funcs["repeat"] = func(count int, s string) (string, error) {
		if count < 0 || len(s)*count > MaxOutputBytes {
			return "", fmt.Errorf("repeat: the result would be larger than %d bytes", MaxOutputBytes)
		}
		return repeat(count, s), nil
	}
	return funcs
}

// boundedString wraps a string-building function so its result may not
// exceed MaxOutputBytes.
func boundedString(name string, f func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		out := f(args...)
		if len(out) > MaxOutputBytes {
			return "", fmt.Errorf("%s: the result is larger than %d bytes", name, MaxOutputBytes)
		}
		return out, nil
	}
}

func toYAML(v any) (string, error) {
	out, err := yaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toYaml: %w", err)
	}
	return strings.TrimSuffix(string(out), "\n"), nil
}

func fromYAML(s string) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("fromYaml: %w", err)
	}
	return m, nil
}

func toJSON(v any) (string, error) {
	out, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toJson: %w", err)
	}
	return string(out), nil
}

func fromJSON(s string) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("fromJson: %w", err)
	}
	return m, nil
}

func toTOML(v any) (string, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(v); err != nil {
		return "", fmt.Errorf("toToml: %w", err)
	}
	return buf.String(), nil
}

// strictIndex is text/template's index without its zero value for a
// missing map key: {{ index .labels "x" }} of a map without "x" fails the
// render, naming the key, as a missing field does. Lists, arrays and
// strings fail on an index out of range, as with the built-in. Use hasKey,
// dig or get for a key that may be absent.
func strictIndex(item reflect.Value, indexes ...reflect.Value) (reflect.Value, error) {
	v := indirectValue(item)
	if !v.IsValid() {
		return reflect.Value{}, errors.New("index of a nil value")
	}
	for _, ix := range indexes {
		ix = indirectValue(ix)
		v = indirectValue(v)
		switch v.Kind() {
		case reflect.Map:
			if !ix.IsValid() {
				return reflect.Value{}, errors.New("index of a map with a nil key")
			}
			if !ix.Type().AssignableTo(v.Type().Key()) {
				if !ix.Type().ConvertibleTo(v.Type().Key()) || ix.Kind() != v.Type().Key().Kind() {
					return reflect.Value{}, fmt.Errorf("index: a key of type %s does not fit a map keyed by %s", ix.Type(), v.Type().Key())
				}
				ix = ix.Convert(v.Type().Key())
			}
			found := v.MapIndex(ix)
			if !found.IsValid() {
				return reflect.Value{}, fmt.Errorf("index: the map has no key %s (use hasKey, dig or get for a key that may be absent)", formatKey(ix))
			}
			v = found
		case reflect.Slice, reflect.Array, reflect.String:
			i, err := intIndex(ix)
			if err != nil {
				return reflect.Value{}, err
			}
			if i < 0 || i >= v.Len() {
				return reflect.Value{}, fmt.Errorf("index %d out of range (length %d)", i, v.Len())
			}
			v = v.Index(i)
		case reflect.Invalid:
			return reflect.Value{}, errors.New("index of a nil value")
		default:
			return reflect.Value{}, fmt.Errorf("cannot index a value of type %s", v.Type())
		}
	}
	return v, nil
}

// indirectValue looks through interfaces and pointers.
func indirectValue(v reflect.Value) reflect.Value {
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

func intIndex(ix reflect.Value) (int, error) {
	switch ix.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(ix.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if ix.Uint() > math.MaxInt32 {
			return 0, fmt.Errorf("index %d out of range", ix.Uint())
		}
		return int(ix.Uint()), nil
	case reflect.Invalid:
		return 0, errors.New("index with a nil index")
	default:
		return 0, fmt.Errorf("index of a list with a %s, want an integer", ix.Type())
	}
}

func formatKey(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return strconv.Quote(k.String())
	}
	return fmt.Sprint(k.Interface())
}

// shellQuote is squote made safe for shell: each argument is wrapped in
// single quotes, and a single quote inside ends the quoting, is written
// escaped with a backslash and reopens it (sprig's squote only wraps, so a
// value with a quote would end the quoting); the results are joined by
// spaces. A nil argument is left out, as sprig does.
func shellQuote(args ...any) string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if a == nil {
			continue
		}
		out = append(out, "'"+strings.ReplaceAll(fmt.Sprint(a), "'", `'\''`)+"'")
	}
	return strings.Join(out, " ")
}

// required fails the render with msg when v is nil or an empty string.
func required(msg string, v any) (any, error) {
	if v == nil {
		return nil, errors.New(msg)
	}
	if s, ok := v.(string); ok && s == "" {
		return nil, errors.New(msg)
	}
	return v, nil
}

// RenderError is a template that failed to parse or execute, with the
// position text/template reported.
type RenderError struct {
	// Template is the name of the template that failed.
	Template string
	// Line is the 1-based line in that template, 0 if unknown.
	Line int
	// Message is what went wrong, without the position prefix.
	Message string
}

func (e *RenderError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("template %s, line %d: %s", e.Template, e.Line, e.Message)
	}
	return fmt.Sprintf("template %s: %s", e.Template, e.Message)
}

// text/template errors start "template: <name>:<line>[:<col>]: <message>".
var positionRE = regexp.MustCompile(`^template: (.+?):(\d+)(?::\d+)?: (.*)$`)

// newRenderError turns a text/template error into a RenderError. The
// innermost position wins: an error inside an included library block names
// that block.
func newRenderError(name string, err error) error {
	var re *RenderError
	if errors.As(err, &re) {
		return re
	}
	msg := err.Error()
	if m := positionRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[2])
		return &RenderError{Template: m[1], Line: line, Message: simplify(m[3])}
	}
	return &RenderError{Template: name, Message: strings.TrimPrefix(msg, "template: ")}
}

// simplify drops text/template's `executing "name" at <...>:` preamble but
// keeps the action, which tells the author what was being evaluated.
var executingRE = regexp.MustCompile(`^executing "[^"]*" at (<.*?>): (.*)$`)

func simplify(msg string) string {
	if m := executingRE.FindStringSubmatch(msg); m != nil {
		if g := guardRE.FindStringSubmatch(m[2]); g != nil && "<"+g[1]+">" == m[1] {
			// A guard guardLoops inserted: the action is not the author's.
			return g[2]
		}
		return m[1] + ": " + m[2]
	}
	return msg
}

var guardRE = regexp.MustCompile(`^error calling (` + tickFunc + `|` + rangeFunc + `): (.*)$`)

// hasKey reports whether m has key k with a value. A key whose value is null
// is absent here, as Deckhouse leaves a feature's key out of the context
// where this context keeps it null (so that a misspelt name stays an error):
// `{{ if hasKey .nodeGroup "static" }}`, Deckhouse's own test, takes the same
// branch in both.
func hasKey(m map[string]any, k string) bool {
	v, ok := m[k]
	return ok && v != nil
}
