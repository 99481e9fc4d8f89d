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
	// budget is the budget of the render using the set; nil while pooled.
	budget *budget
}

// compiledSets pools compiled templates by name and text. The pools are
// emptied by the garbage collector when idle (sync.Pool), and the index of
// pools starts over when it holds maxCompiledTexts texts or
// maxCompiledBytes of them, which bounds what a stream of ever-new texts
// keeps (a sandbox worker's memory limit must not be reached by texts
// that rendered long ago).
type compiledSets struct {
	mu    sync.Mutex
	pools map[compiledKey]*sync.Pool
	bytes int
}

type compiledKey struct{ name, text string }

const (
	maxCompiledTexts = 1024
	maxCompiledBytes = 8 << 20
)

func (s *compiledSets) pool(k compiledKey) *sync.Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pools[k]; p != nil {
		return p
	}
	size := len(k.name) + len(k.text)
	if s.pools == nil || len(s.pools) >= maxCompiledTexts || s.bytes+size > maxCompiledBytes {
		s.pools, s.bytes = make(map[compiledKey]*sync.Pool), 0
	}
	s.bytes += size
	p := &sync.Pool{}
	s.pools[k] = p
	return p
}

// acquire returns a compiled template of text for one render, parsing it
// when none is free; release gives it back. A text that does not parse
// is not pooled: its error is returned each time.
func (e *Engine) acquire(name, text string) (*compiled, *sync.Pool, error) {
	p := e.compiled.pool(compiledKey{name, text})
	if c, ok := p.Get().(*compiled); ok {
		return c, p, nil
	}
	c, err := e.compile(name, text)
	return c, p, err
}

func release(p *sync.Pool, c *compiled) {
	c.budget = nil
	p.Put(c)
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
