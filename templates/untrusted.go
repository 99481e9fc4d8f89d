package templates

import "maps"

// Untrusted renders template text that comes from outside the server
// (NodeGroupConfiguration content) somewhere it cannot hurt the server:
// templates/sandbox implements it with worker processes bounded in CPU
// time and memory.
type Untrusted interface {
	Render(name, text string, data any) (string, error)
}

// WithSandbox returns a copy of the tree that renders custom steps with u;
// the built-in templates, which ship with the server, still render in
// process.
func (t *Tree) WithSandbox(u Untrusted) *Tree {
	c := *t
	e := *t.engine
	e.untrusted = u
	c.engine = &e
	return &c
}

// Library is the tree's library templates (path → text), which a sandbox
// needs for include and template.
func (t *Tree) Library() map[string]string { return maps.Clone(t.engine.library) }

// RenderUntrusted renders text that comes from outside the server: in the
// sandbox when the engine has one, otherwise like Render.
func (e *Engine) RenderUntrusted(name, text string, data any) (string, error) {
	if e.untrusted != nil {
		return e.untrusted.Render(name, text, data)
	}
	return e.Render(name, text, data)
}
