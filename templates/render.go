package templates

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxWeight is the largest NodeGroupConfiguration weight: the step file name
// carries the weight in exactly three digits, so larger weights would sort
// out of order. The CRD refuses them.
const MaxWeight = 999

// CustomStep is a NodeGroupConfiguration as the renderer needs it.
type CustomStep struct {
	// Name is the object's metadata.name.
	Name string
	// Weight orders the step, 0..999.
	Weight int32
	// Bundles the step applies to; "*" or empty means every bundle.
	Bundles []string
	// Content is bash, optionally with template actions.
	Content string
}

// FileName is the step's name in the bundle: the weight in three digits, an
// underscore, the object's name, and ".sh" unless the name already ends so.
func (s CustomStep) FileName() string {
	var name string
	if s.Weight >= 0 && s.Weight <= MaxWeight {
		// What the Sprintf below gives, without its cost: a render names
		// every step of every group.
		name = strconv.Itoa(int(s.Weight) + 1000)[1:] + "_" + s.Name
	} else {
		name = fmt.Sprintf("%03d_%s", s.Weight, s.Name)
	}
	if !strings.HasSuffix(name, ".sh") {
		name += ".sh"
	}
	return name
}

// Bundle is everything rendered for one node group.
type Bundle struct {
	// Bashible is bashible.sh.
	Bashible string
	// Steps maps step file names to scripts.
	Steps map[string]string
	// Bootstrap is the first-boot script.
	Bootstrap string
	// Checksum is a sha256 (hex) over bashible.sh and the steps: exactly
	// what the group's nodes apply. The bootstrap script is not part of it.
	Checksum string
}

// Failure is one thing that did not render for a group.
type Failure struct {
	// Custom is the NodeGroupConfiguration at fault, empty for a built-in template.
	Custom string
	// Err says what failed; a *RenderError when a template failed.
	Err error
}

func (f Failure) Error() string {
	if f.Custom != "" {
		return fmt.Sprintf("NodeGroupConfiguration %s: %v", f.Custom, f.Err)
	}
	return f.Err.Error()
}

// Render renders the tree and the custom steps with ctx. It returns the
// bundle only when everything rendered; otherwise it returns every failure,
// each attributed to its NodeGroupConfiguration when it has one, and no
// bundle, so a broken change is never served half-way.
//
// Nothing is served that a node could not run as intended: the context is
// checked first (Context.Check: no line breaks or control characters where
// a value is one line, canonical certificates), a custom step's name, OS
// bundles and content are checked, and every rendered script is parsed as
// bash (checkScript). Failures never carry the context's credentials
// (Context.Secrets): they are redacted before they are returned.
func (t *Tree) Render(ctx *Context, custom []CustomStep) (*Bundle, []Failure) {
	redact := newRedactor(ctx.Secrets())
	bundle, failures := t.render(ctx, custom)
	for i := range failures {
		failures[i] = redact.failure(failures[i])
	}
	return bundle, failures
}

func (t *Tree) render(ctx *Context, custom []CustomStep) (*Bundle, []Failure) {
	if err := ctx.Check(); err != nil {
		return nil, []Failure{{Err: err}}
	}
	values, err := ctx.Values()
	if err != nil {
		return nil, []Failure{{Err: err}}
	}
	multiline := ctx.multilineValues()
	var failures []Failure
	render := func(name, text string) string {
		out, err := t.engine.Render(name, text, values)
		if err == nil {
			if err = checkScript(name, out, multiline); err != nil {
				err = fmt.Errorf("template %s: %w", name, err)
			}
		}
		if err != nil {
			failures = append(failures, Failure{Err: err})
		}
		return out
	}
	b := &Bundle{Steps: make(map[string]string, len(t.steps)+len(custom))}
	b.Bashible = render("bashible.sh.tpl", t.bashible)
	b.Bootstrap = render("bootstrap.sh.tpl", t.bootstrap)
	for _, s := range t.steps {
		b.Steps[s.name] = render("steps/"+s.name+".tpl", s.text)
	}

	failures = append(failures, t.placeCustom(b, custom, nil, values, multiline)...)
	if len(failures) > 0 {
		return nil, failures
	}
	b.Checksum = Checksum(b.Bashible, b.Steps)
	return b, nil
}

// placeCustom renders the custom steps and places them in b, which holds
// the built-in steps, as Render does; known are the files of steps placed
// before with the same context (by step name, for the steps unchanged
// since: see Recompose), which are taken as they are, neither checked nor
// rendered again. It returns the custom steps' failures.
func (t *Tree) placeCustom(b *Bundle, custom []CustomStep, known map[string]string, values map[string]any, multiline []string) []Failure {
	// Custom steps in name order, so collisions are attributed the same way
	// on every replica. The steps that pass their own checks render
	// together (in the sandbox, one request); their results are then taken
	// in that order, so a step that failed to render claims no file, as
	// if each had rendered in turn.
	custom = slices.Clone(custom)
	slices.SortFunc(custom, func(a, b CustomStep) int { return strings.Compare(a.Name, b.Name) })
	var failures []Failure
	refused := make([]error, len(custom))
	var texts []NamedText
	for i, s := range custom {
		if _, ok := known[s.Name]; ok {
			continue
		}
		if refused[i] = s.check(); refused[i] == nil && !s.static() {
			texts = append(texts, NamedText{Name: "NodeGroupConfiguration/" + s.Name, Text: s.Content})
		}
	}
	outs, errs := t.engine.renderUntrusted(texts, values)
	owner := map[string]string{}
	for i, s := range custom {
		if refused[i] != nil {
			failures = append(failures, Failure{Custom: s.Name, Err: refused[i]})
			continue
		}
		file := s.FileName()
		placed, isKnown := known[s.Name]
		var out string
		var err error
		switch {
		case isKnown:
		case s.static():
			out = s.Content
		default:
			out, err = outs[0], errs[0]
			outs, errs = outs[1:], errs[1:]
		}
		switch {
		case owner[file] != "":
			failures = append(failures, Failure{Custom: s.Name, Err: fmt.Errorf("step %s is already the step of NodeGroupConfiguration %s; change the weight or the name", file, owner[file])})
			continue
		case b.Steps[file] != "":
			failures = append(failures, Failure{Custom: s.Name, Err: fmt.Errorf("step %s is a built-in step and cannot be replaced; change the weight or the name", file)})
			continue
		}
		if isKnown {
			owner[file] = s.Name
			b.Steps[file] = placed
			continue
		}
		if err == nil {
			if err = checkControlCharacters(out, true); err != nil {
				err = fmt.Errorf("the rendered step: %w", err)
			}
		}
		if err == nil {
			err = checkScript(file, out, multiline)
		}
		if err != nil {
			failures = append(failures, Failure{Custom: s.Name, Err: err})
			continue
		}
		owner[file] = s.Name
		b.Steps[file] = bundleHeader(s) + out
	}
	return failures
}

// Recompose is Render(ctx, custom) computed from base, the bundle
// Render(ctx, baseCustom) returned (with no failure): the built-in
// templates are not rendered again, nor is any custom step that is in
// baseCustom unchanged (name, weight, bundles and content); only the
// others are checked and rendered (in the sandbox, under its bounds).
// What is placed, refused and reported is what Render would give: the
// steps are placed in the same order, with the same collision rules.
// A template sees only the context, never another step, so a step
// rendered with the same context renders to the same script (a template
// that reads the clock or a random source excepted, which Render would
// render anew).
//
// The caller must know that base is that render (bundles.Renderer checks
// the render's input hash). ok is false when base cannot be recomposed:
// a step of baseCustom has the file name of a built-in step (one that
// rendered empty and was replaced); then only Render can tell.
func (t *Tree) Recompose(ctx *Context, base *Bundle, baseCustom, custom []CustomStep) (bundle *Bundle, failures []Failure, ok bool) {
	return t.recompose(ctx, base, baseCustom, custom, true)
}

// RecomposeSteps is Recompose without the checksum (the bundle's Checksum
// is empty): for a caller that compares the steps themselves (a preview
// that says which steps change, not what the new checksum is), and spares
// hashing every script of the group, most of a one-step recompose's cost.
func (t *Tree) RecomposeSteps(ctx *Context, base *Bundle, baseCustom, custom []CustomStep) (bundle *Bundle, failures []Failure, ok bool) {
	return t.recompose(ctx, base, baseCustom, custom, false)
}

func (t *Tree) recompose(ctx *Context, base *Bundle, baseCustom, custom []CustomStep, checksum bool) (bundle *Bundle, failures []Failure, ok bool) {
	baseCustom, custom = byName(baseCustom), byName(custom)
	// removed are base's steps that are gone or changed, added the steps
	// that are new or changed; the others are base's as they are. A
	// NodeGroupConfiguration that selects every group changes one step of
	// each, so this is the work per group: nothing here is done per
	// unchanged step but comparing it.
	var removed, added []CustomStep
	for i, j := 0, 0; i < len(baseCustom) || j < len(custom); {
		switch {
		case j == len(custom) || (i < len(baseCustom) && baseCustom[i].Name < custom[j].Name):
			removed = append(removed, baseCustom[i])
			i++
		case i == len(baseCustom) || custom[j].Name < baseCustom[i].Name:
			added = append(added, custom[j])
			j++
		default:
			if !sameStep(baseCustom[i], custom[j]) {
				removed, added = append(removed, baseCustom[i]), append(added, custom[j])
			}
			i, j = i+1, j+1
		}
	}
	if len(removed) == 0 && len(added) == 0 {
		return base, nil, true
	}
	b := &Bundle{Bashible: base.Bashible, Bootstrap: base.Bootstrap, Steps: maps.Clone(base.Steps)}
	for _, s := range removed {
		file := s.FileName()
		if t.builtin(file) {
			// It replaced a built-in step that rendered empty: only
			// Render can say what takes the file now.
			return nil, nil, false
		}
		if _, placed := base.Steps[file]; !placed {
			return nil, nil, false
		}
		delete(b.Steps, file)
	}
	// The added steps compete for their files with each other, with a
	// built-in step of the same file and with an unchanged step placed
	// there; placeCustom decides among them exactly as Render does among
	// every step, the others being placed already.
	isAdded := make(map[string]bool, len(added))
	files := make(map[string]bool, len(added))
	templated := false
	for _, s := range added {
		isAdded[s.Name] = true
		files[s.FileName()] = true
		templated = templated || !s.static()
	}
	competing := slices.Clone(added)
	known := map[string]string{}
	contested := &Bundle{Steps: map[string]string{}}
	for file := range files {
		placed, taken := b.Steps[file]
		if !taken {
			continue
		}
		delete(b.Steps, file)
		if holder, ok := holderOf(custom, isAdded, file); ok {
			competing = append(competing, holder)
			known[holder.Name] = placed
			if t.builtin(file) {
				contested.Steps[file] = "" // the built-in it replaced rendered empty
			}
			continue
		}
		contested.Steps[file] = placed // a built-in step
	}
	var values map[string]any
	var multiline []string
	if len(added) > 0 {
		multiline = ctx.multilineValues()
	}
	// The context is checked and encoded only for a step that reads it: a
	// static step reads no value, and base rendered under this context,
	// so it passed the check.
	if templated {
		if err := ctx.Check(); err != nil {
			return nil, ctx.RedactFailures([]Failure{{Err: err}}), true
		}
		var err error
		if values, err = ctx.Values(); err != nil {
			return nil, ctx.RedactFailures([]Failure{{Err: err}}), true
		}
	}
	failures = t.placeCustom(contested, competing, known, values, multiline)
	if len(failures) > 0 {
		return nil, ctx.RedactFailures(failures), true
	}
	maps.Copy(b.Steps, contested.Steps)
	if checksum {
		b.Checksum = Checksum(b.Bashible, b.Steps)
	}
	return b, nil, true
}

// holderOf is the step of custom, not one of added, whose file is file.
func holderOf(custom []CustomStep, added map[string]bool, file string) (CustomStep, bool) {
	for _, s := range custom {
		if !added[s.Name] && s.FileName() == file {
			return s, true
		}
	}
	return CustomStep{}, false
}

// byName is steps sorted by name (a copy when they were not).
func byName(steps []CustomStep) []CustomStep {
	byName := func(a, b CustomStep) int { return strings.Compare(a.Name, b.Name) }
	if slices.IsSortedFunc(steps, byName) {
		return steps
	}
	steps = slices.Clone(steps)
	slices.SortFunc(steps, byName)
	return steps
}

// builtin says file is a built-in step's.
func (t *Tree) builtin(file string) bool {
	return slices.ContainsFunc(t.steps, func(s namedText) bool { return s.name == file })
}

// static says the step's content holds no template action: without the
// action delimiter, text/template parses it as one text node, which
// renders to the content itself in every context. Such a step (most
// NodeGroupConfigurations are plain scripts) is placed as it is, with no
// render in the sandbox and no render context encoded for it; it is
// checked like any rendered step.
func (s CustomStep) static() bool { return !strings.Contains(s.Content, "{{") }

// sameStep says a and b render to the same file.
func sameStep(a, b CustomStep) bool {
	return a.Name == b.Name && a.Weight == b.Weight && a.Content == b.Content && slices.Equal(a.Bundles, b.Bundles)
}

// bundleRE is an OS bundle a custom step may name (the CRD's pattern).
var bundleRE = regexp.MustCompile(`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`)

// check refuses a step that could not be served as it is: a weight the
// file name cannot carry, a name that is no object name or would make a
// file name too long, a bundle that is not a plain name, content with
// control characters (a NUL would make bashible write another step). The
// API refuses all of these; the renderer does too.
func (s CustomStep) check() error {
	if s.Weight < 0 || s.Weight > MaxWeight {
		return fmt.Errorf("weight %d is outside 0..%d", s.Weight, MaxWeight)
	}
	if len(s.Name) > MaxCustomStepNameLength {
		return fmt.Errorf("the name is longer than %d characters, which a step file name cannot carry; choose a shorter name", MaxCustomStepNameLength)
	}
	if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
		return fmt.Errorf("the name %q is not an object name: %s", s.Name, strings.Join(errs, "; "))
	}
	for _, b := range s.Bundles {
		if !bundleRE.MatchString(b) {
			return fmt.Errorf("bundle %q is not \"*\" or a bundle name such as debian", b)
		}
	}
	if err := checkControlCharacters(s.Content, true); err != nil {
		return fmt.Errorf("content: %w (scripts may hold tabs and line breaks only; save them with Unix line ends)", err)
	}
	return nil
}

// bundleHeader makes a custom step exit early on nodes whose OS bundle it
// was not written for. bashible.sh exports BASHIBLE_BUNDLE after detecting
// the OS.
func bundleHeader(s CustomStep) string {
	if len(s.Bundles) == 0 || slices.Contains(s.Bundles, "*") {
		return ""
	}
	list := strings.Join(s.Bundles, " ")
	return fmt.Sprintf(`# Generated by bashible-apiserver: NodeGroupConfiguration %q applies to bundles: %s.
case "${BASHIBLE_BUNDLE:?bashible.sh exports BASHIBLE_BUNDLE}" in
  %s) ;;
  *) echo "step skipped: bundle ${BASHIBLE_BUNDLE} is not one of: %s"; exit 0 ;;
esac
`, s.Name, list, strings.Join(s.Bundles, "|"), list)
}

// Checksum is the configuration checksum of a group: sha256 over
// bashible.sh and every step, in name order, each length-prefixed so no two
// different bundles hash alike.
func Checksum(bashible string, steps map[string]string) string {
	h := sha256.New()
	write := func(name, content string) {
		fmt.Fprintf(h, "%d:%s\x00%d:", len(name), name, len(content))
		hashString(h, content)
	}
	write("bashible.sh", bashible)
	names := make([]string, 0, len(steps))
	for name := range steps {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		write(name, steps[name])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hashString writes s to h without copying it: a full render hashes about
// 17 MB of scripts, and a []byte conversion copied each of them. A hash
// neither keeps nor changes what it is given (io.Writer's contract).
func hashString(h hash.Hash, s string) {
	h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
}
