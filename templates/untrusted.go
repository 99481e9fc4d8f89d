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
	// RenderJSON renders each of texts with the render context's values,
	// given as their JSON encoding: outs[i] and errs[i] are texts[i]'s,
	// and an error is that text's alone.
	RenderJSON(texts []NamedText, values []byte) (outs []string, errs []error)
}

// NamedText is a template's text and the name errors give it.
type NamedText struct {
	Name string `json:"name"`
	Text string `json:"text"`
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

// renderUntrusted renders texts that come from outside the server: in the
// sandbox when the engine has one, all at once, with values encoded once
// (encoding them, and a round trip, for each of a group's 30
// NodeGroupConfigurations was most of what the sandbox cost a full
// render); otherwise one by one like Render.
func (e *Engine) renderUntrusted(texts []NamedText, values any) ([]string, []error) {
	outs, errs := make([]string, len(texts)), make([]error, len(texts))
	if e.untrusted == nil {
		for i, t := range texts {
			outs[i], errs[i] = e.Render(t.Name, t.Text, values)
		}
		return outs, errs
	}
	if len(texts) == 0 {
		return outs, errs
	}
	encoded, err := json.Marshal(values)
	if err != nil {
		for i, t := range texts {
			errs[i] = &RenderError{Template: t.Name, Message: fmt.Sprintf("encode the render context: %v", err)}
		}
		return outs, errs
	}
	return e.untrusted.RenderJSON(texts, encoded)
}
