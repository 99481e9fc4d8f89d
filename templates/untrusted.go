package templates

import (
	"encoding/json"
	"fmt"
	"maps"
)

// Untrusted renders template text that comes from outside the server
// (NodeGroupConfiguration content) somewhere it cannot hurt the server:
// templates/sandbox implements it with worker processes bounded in CPU
// time and memory.
type Untrusted interface {
	// RenderJSON renders text, named name in errors, with the render
	// context's values given as their JSON encoding.
	RenderJSON(name, text string, values []byte) (string, error)
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

// renderUntrusted renders text that comes from outside the server: in the
// sandbox when the engine has one, otherwise like Render. encoded holds
// values' JSON once a sandboxed render has made it, for the render's other
// untrusted texts: encoding the values for each of a group's 30
// NodeGroupConfigurations was most of what the sandbox cost a full render.
func (e *Engine) renderUntrusted(name, text string, values any, encoded *[]byte) (string, error) {
	if e.untrusted == nil {
		return e.Render(name, text, values)
	}
	if *encoded == nil {
		b, err := json.Marshal(values)
		if err != nil {
			return "", &RenderError{Template: name, Message: fmt.Sprintf("encode the render context: %v", err)}
		}
		*encoded = b
	}
	return e.untrusted.RenderJSON(name, text, *encoded)
}
