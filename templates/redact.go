package templates

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Redacted stands in an error for a credential of the render context.
const Redacted = "[redacted]"

// minRedacted is the shortest text redacted: a one- or two-character
// user or password guards nothing, and replacing every such letter would
// leave no message readable (the pair, its base64 and longer forms still go).
const minRedacted = 3

// redactor removes credentials from text: each secret as it is, and in the
// forms a template turns it into without trying (quoted by Go or JSON,
// percent-encoded, base64). A template that transforms a credential on
// purpose can still print it; this keeps an accident out of statuses,
// Events, logs and metrics.
type redactor struct{ forms []string }

func newRedactor(secrets []string) redactor {
	var forms []string
	add := func(s string) {
		if len(s) >= minRedacted && !slices.Contains(forms, s) {
			forms = append(forms, s)
		}
	}
	for _, s := range secrets {
		add(s)
		add(strings.Trim(strconv.Quote(s), `"`))
		if j, err := json.Marshal(s); err == nil {
			add(strings.Trim(string(j), `"`))
		}
		add(url.QueryEscape(s))
		add(url.PathEscape(s))
		add(base64.StdEncoding.EncodeToString([]byte(s)))
		add(base64.RawStdEncoding.EncodeToString([]byte(s)))
		if u, err := url.QueryUnescape(s); err == nil {
			add(u)
		}
	}
	// Longest first, so a secret that contains another goes whole.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return redactor{forms: forms}
}

func (r redactor) redact(s string) string {
	for _, f := range r.forms {
		s = strings.ReplaceAll(s, f, Redacted)
	}
	return s
}

// failure returns f with its error redacted. A *RenderError stays one (its
// template name and line are the user's own), anything else becomes a
// plain error with the redacted message.
func (r redactor) failure(f Failure) Failure {
	if len(r.forms) == 0 || f.Err == nil {
		return f
	}
	var re *RenderError
	if errors.As(f.Err, &re) && re.Error() == f.Err.Error() {
		c := *re
		c.Message = r.redact(c.Message)
		c.Template = r.redact(c.Template)
		f.Err = &c
		return f
	}
	if msg := r.redact(f.Err.Error()); msg != f.Err.Error() {
		f.Err = errors.New(msg)
	}
	return f
}

// RedactFailures removes the context's credentials from failures, for
// callers that report failures they made themselves.
func (c *Context) RedactFailures(failures []Failure) []Failure {
	r := newRedactor(c.Secrets())
	out := make([]Failure, len(failures))
	for i, f := range failures {
		out[i] = r.failure(f)
	}
	return out
}

// Redacted returns a copy of the context for showing to people (the
// bashible-apiserver-context Secret): every value tagged secret is
// replaced by Redacted: a whole value, or for a URL its user information
// (http://[redacted]@proxy:3128). Templates always see the real values.
func (c *Context) Redacted() (Context, error) {
	var out Context
	data, err := json.Marshal(c)
	if err != nil {
		return Context{}, fmt.Errorf("copy render context: %w", err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return Context{}, fmt.Errorf("copy render context: %w", err)
	}
	redactValue(reflect.ValueOf(&out).Elem(), nil)
	return out, nil
}

// redactValue replaces, in place, the strings of v tagged secret (opts
// are those of the field that holds v, inherited by list elements).
func redactValue(v reflect.Value, opts tagOptions) {
	switch v.Kind() {
	case reflect.String:
		kind, secret := opts["secret"]
		if !secret || v.String() == "" || !v.CanSet() {
			return
		}
		s := v.String()
		if kind == "url" {
			if info := userInfo(s); info != "" {
				v.SetString(strings.Replace(s, info+"@", Redacted+"@", 1))
			}
			return
		}
		v.SetString(Redacted)
	case reflect.Pointer:
		if !v.IsNil() {
			redactValue(v.Elem(), opts)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				redactValue(v.Field(i), parseTag(t.Field(i).Tag.Get(renderTag)))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			redactValue(v.Index(i), opts)
		}
	}
}
