package templates

import (
	"sync"
	"text/template"
)

// A compiled template is one template text parsed on its own clone of the
// library, with include, tpl and the loop guard bound to whichever render
// uses it. A render takes one from its text's pool and gives it back when
// it is done, so a text is parsed, and the library cloned, once per
// render running at once rather than once per render: on a full render of
// 100 groups these were most of the engine's cost. Executing a template
// changes nothing in its set, so a reused set renders exactly what a fresh
// clone and parse would; a set is never shared by two renders at once, and
// only holds the templates its own text defines.
type compiled struct {
	t *template.Template
	// budget is the budget of the render using the set; nil while idle.
	budget *budget
	// lastSize is the length of the set's last output.
	lastSize int
}

// compiledSets pools compiled templates by name and text. Each text keeps
// one idle set for certain (spare): a sync.Pool alone is emptied by every
// other garbage collection, and a full render of 100 groups allocates
// enough to collect several times, so most of its renders parsed again.
// Sets beyond the spare (renders of one text running at once) go to the
// text's sync.Pool, which the collector empties when idle. The index starts
// over when it holds maxCompiledTexts texts or maxCompiledBytes of them,
// which bounds what a stream of ever-new texts keeps (a sandbox worker's
// memory limit must not be reached by texts that rendered long ago): a
// set costs about 22 KB besides its text's parse tree.
type compiledSets struct {
	mu    sync.Mutex
	texts map[compiledKey]*compiledText
	bytes int
}

type compiledKey struct{ name, text string }

// compiledText is one text's idle sets.
type compiledText struct {
	spare *compiled // guarded by compiledSets.mu
	more  sync.Pool
}

const (
	maxCompiledTexts = 512
	maxCompiledBytes = 4 << 20
)

func (s *compiledSets) text(k compiledKey) *compiledText {
	if p := s.texts[k]; p != nil {
		return p
	}
	size := len(k.name) + len(k.text)
	if s.texts == nil || len(s.texts) >= maxCompiledTexts || s.bytes+size > maxCompiledBytes {
		s.texts, s.bytes = make(map[compiledKey]*compiledText), 0
	}
	s.bytes += size
	p := &compiledText{}
	s.texts[k] = p
	return p
}

// get returns an idle set of k's text, or nil.
func (s *compiledSets) get(k compiledKey) (*compiledText, *compiled) {
	s.mu.Lock()
	p := s.text(k)
	c := p.spare
	p.spare = nil
	s.mu.Unlock()
	if c == nil {
		c, _ = p.more.Get().(*compiled)
	}
	return p, c
}

// put makes c idle again.
func (s *compiledSets) put(p *compiledText, c *compiled) {
	c.budget = nil
	s.mu.Lock()
	if p.spare == nil {
		p.spare, c = c, nil
	}
	s.mu.Unlock()
	if c != nil {
		p.more.Put(c)
	}
}

// acquire returns a compiled template of text for one render, parsing it
// when none is idle, and the function that gives it back. A text that does
// not parse is not kept: its error is returned each time.
func (e *Engine) acquire(name, text string) (*compiled, func(), error) {
	p, c := e.compiled.get(compiledKey{name, text})
	if c == nil {
		var err error
		if c, err = e.compile(name, text); err != nil {
			return nil, nil, err
		}
	}
	return c, func() { e.compiled.put(p, c) }, nil
}

// compile parses text, named name, on a clone of the library, with the
// functions that depend on the render bound to c.budget.
func (e *Engine) compile(name, text string) (*compiled, error) {
	base, err := e.base.Clone()
	if err != nil {
		return nil, newRenderError(name, err)
	}
	c := &compiled{}
	t := base.New(name)
	t.Funcs(template.FuncMap{
		"include": func(tmpl string, data any) (string, error) {
			b := c.budget
			defer b.leave()
			if err := b.enter("include " + tmpl); err != nil {
				return "", err
			}
			buf := &limitedBuffer{budget: b}
			if err := t.ExecuteTemplate(buf, tmpl, data); err != nil {
				// Keep the included block's own position: text/template
				// wraps this error, and newRenderError finds it again.
				return "", newRenderError(tmpl, err)
			}
			return buf.buf.String(), nil
		},
		"tpl": func(text string, data any) (string, error) {
			b := c.budget
			defer b.leave()
			if err := b.enter("tpl"); err != nil {
				return "", err
			}
			return e.render(name+"/tpl", text, data, b)
		},
		tickFunc: func() (string, error) { return c.budget.tick() },
	})
	if _, err := t.Parse(text); err != nil {
		return nil, newRenderError(name, err)
	}
	guardLoops(t)
	c.t = t
	return c, nil
}
