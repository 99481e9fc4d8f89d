package templates

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// How a string field of the context may look, declared with the struct tag
// `render:"..."` (comma-separated) and inherited by the elements of a list
// or map:
//
//	multiline  line breaks (\n) are allowed; by default a value is one line
//	pem        a canonical PEM encoding of certificates (CanonicalCertificates)
//	word       letters, digits and . _ : / @ + = - [ ] only: the value is
//	           written unquoted into a configuration file or a unit
//	url        an http:// or https:// URL without whitespace, quotes,
//	           backslashes, $ or backquotes
//	secret     a credential: kept out of every error (see Secrets); with
//	           =basic it is base64 of user:password, with =url only the
//	           user information of a URL is secret
//
// Whatever the tag, no value may carry a control character other than a tab
// (and a line break where multiline). Check walks every string of the
// context, map keys included, so a field added later is covered without
// anyone remembering to.
const renderTag = "render"

// wordRE is what a `word` field may hold.
var wordRE = regexp.MustCompile(`^[A-Za-z0-9._:/@+=\[\]-]*$`)

// Check refuses a context no script may be rendered from: a string with a
// control character (a line break in a single-line field), a field tagged
// pem that is not canonical PEM, a word field with other characters. The
// error names the field by its path, such as
// nodeGroup.cri.notManaged.criSocketPath or nodeGroup.nodeTemplate.labels["a"].
// Values come through the API's validation; Check is the renderer's own
// guarantee for whatever got past it (an object stored before a rule
// existed, a context built by other code).
func (c *Context) Check() error {
	var errs []string
	walkStrings(reflect.ValueOf(c).Elem(), "", nil, func(path string, opts tagOptions, s string) {
		if err := checkString(s, opts); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", path, err))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("render context: %s; the value comes from the NodeGroup or the cluster configuration: fix it there", strings.Join(errs, "; "))
	}
	return nil
}

// Secrets are the credentials in the context, in every form a template can
// easily turn them into: each secret field's value, and for base64 user:password
// the decoded pair, user and password; for a URL its user information and
// password, raw and percent-decoded. Render failures are redacted of them.
func (c *Context) Secrets() []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	walkStrings(reflect.ValueOf(c).Elem(), "", nil, func(_ string, opts tagOptions, s string) {
		kind, ok := opts["secret"]
		if !ok || s == "" {
			return
		}
		switch kind {
		case "basic":
			add(s)
			if decoded, err := base64.StdEncoding.DecodeString(s); err == nil {
				add(string(decoded))
				user, password, _ := strings.Cut(string(decoded), ":")
				add(user)
				add(password)
			}
		case "url":
			if info := userInfo(s); info != "" {
				add(info)
				user, password, _ := strings.Cut(info, ":")
				add(user)
				add(password)
			}
		default:
			add(s)
		}
	})
	return out
}

// userInfo is what stands between "://" and the last "@" of a URL's
// authority, read the way withoutUserInfo reads it (so a URL that does not
// parse still gives it up): "user:password", or "" when there is none.
func userInfo(u string) string {
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		rest = u
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		return authority[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return rest[:i]
	}
	return ""
}

type tagOptions map[string]string

func parseTag(tag string) tagOptions {
	opts := tagOptions{}
	for _, o := range strings.Split(tag, ",") {
		if o == "" {
			continue
		}
		k, v, _ := strings.Cut(o, "=")
		opts[k] = v
	}
	return opts
}

// walkStrings calls f for every string reachable from v (map keys with no
// options), with its path and the options of the field that holds it.
func walkStrings(v reflect.Value, path string, opts tagOptions, f func(path string, opts tagOptions, s string)) {
	switch v.Kind() {
	case reflect.String:
		f(path, opts, v.String())
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walkStrings(v.Elem(), path, opts, f)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			field := t.Field(i)
			if !field.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
			if name == "" {
				name = field.Name
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			walkStrings(v.Field(i), p, parseTag(field.Tag.Get(renderTag)), f)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walkStrings(v.Index(i), fmt.Sprintf("%s[%d]", path, i), opts, f)
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			kp := fmt.Sprintf("%s[%s]", path, strconv.Quote(fmt.Sprint(k)))
			if k.Kind() == reflect.String {
				f(path+" key "+strconv.Quote(k.String()), nil, k.String())
			}
			walkStrings(v.MapIndex(k), kp, opts, f)
		}
	}
}

func checkString(s string, opts tagOptions) error {
	_, multiline := opts["multiline"]
	if err := checkControlCharacters(s, multiline); err != nil {
		return err
	}
	if _, ok := opts["word"]; ok && !wordRE.MatchString(s) {
		return fmt.Errorf("%q has a character other than letters, digits and . _ : / @ + = - [ ]", s)
	}
	if _, ok := opts["url"]; ok && !urlRE.MatchString(s) {
		return fmt.Errorf("%q is not an http:// or https:// URL without whitespace, quotes, backslashes, $ or backquotes", s)
	}
	if _, ok := opts["pem"]; ok && s != "" {
		canonical, err := CanonicalCertificates(s)
		if err != nil {
			return err
		}
		if canonical != s {
			return fmt.Errorf("not in the canonical PEM encoding of its certificates")
		}
	}
	return nil
}

// checkControlCharacters refuses C0 control characters and DEL except the
// tab, and the line break where lines are allowed; invalid UTF-8 too. The
// error gives the 1-based line and the character.
func checkControlCharacters(s string, multiline bool) error {
	line := 1
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return fmt.Errorf("line %d: invalid UTF-8", line)
		case r == '\n' && multiline:
			line++
		case r == '\t':
		case r < 0x20 || r == 0x7f:
			what := fmt.Sprintf("control character %U", r)
			switch r {
			case '\n':
				what = "line break (a single-line value)"
			case '\r':
				what = "control character U+000D (carriage return)"
			case 0:
				what = "control character U+0000 (NUL)"
			}
			return fmt.Errorf("line %d: a %s", line, what)
		}
	}
	return nil
}

// CanonicalCertificates parses PEM certificates and encodes them again:
// only whitespace may surround or separate the blocks (text before, between
// or after them is refused, never carried along), blocks must be
// CERTIFICATE without headers, and each must parse as X.509. The result is
// the blocks' standard encoding, so no line of it is anything but a BEGIN
// or END line or base64.
func CanonicalCertificates(pemText string) (string, error) {
	lines := strings.Split(pemText, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	rest := bytes.TrimSpace([]byte(strings.Join(lines, "\n")))
	if len(rest) == 0 {
		return "", fmt.Errorf("no certificate")
	}
	var out bytes.Buffer
	for n := 1; len(rest) > 0; n++ {
		if !bytes.HasPrefix(rest, []byte("-----BEGIN ")) {
			return "", fmt.Errorf("certificate %d: text outside a PEM block", n)
		}
		block, next := pem.Decode(rest)
		if block == nil {
			return "", fmt.Errorf("certificate %d: not a PEM block", n)
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) > 0 {
			return "", fmt.Errorf("certificate %d: a %s block, want CERTIFICATE without headers", n, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("certificate %d: %w", n, err)
		}
		if err := pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}); err != nil {
			return "", err
		}
		rest = bytes.TrimSpace(next)
	}
	return out.String(), nil
}

// multilineValues are the context's values that may hold line breaks.
func (c *Context) multilineValues() []string {
	var out []string
	walkStrings(reflect.ValueOf(c).Elem(), "", nil, func(_ string, opts tagOptions, s string) {
		if _, ok := opts["multiline"]; ok && s != "" {
			out = append(out, s)
		}
	})
	return out
}
