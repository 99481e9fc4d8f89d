package templates

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// MaxCustomStepNameLength bounds a NodeGroupConfiguration's name, so its
// step file (NNN_<name>.sh, and the temporary names bashible writes beside
// it) stays well under the 255 bytes a file name may have. The CRD refuses
// longer names; the renderer refuses them too.
const MaxCustomStepNameLength = 200

// checkScript parses a rendered script as bash, the way bashible runs it,
// and refuses it when bash could not run it, or when one of its here-
// documents would end early: a multi-line context value with a line equal
// to the delimiter, or a command named like a delimiter (what is left of a
// here-document that a value ended). Errors give the line of the script.
func checkScript(name, script string, multiline []string) error {
	key := scriptKey(script, multiline)
	if passedChecks.has(key) {
		return nil
	}
	if err := parseAndCheckScript(name, script, multiline); err != nil {
		return err
	}
	passedChecks.add(key)
	return nil
}

// passedChecks remembers scripts that passed checkScript: most steps render
// to the same text for many groups and across re-renders, and parsing is
// the larger part of a render's cost. Only a pass is remembered, keyed by
// everything the check reads, so a remembered pass is exactly what a new
// parse would say.
var passedChecks = &checkCache{max: 4096}

type checkCache struct {
	mu   sync.Mutex
	max  int
	seen map[[sha256.Size]byte]bool
}

func (c *checkCache) has(k [sha256.Size]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[k]
}

// add remembers k; a full cache starts over, which bounds its memory.
func (c *checkCache) add(k [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || len(c.seen) >= c.max {
		c.seen = make(map[[sha256.Size]byte]bool, c.max)
	}
	c.seen[k] = true
}

// scriptKey identifies a script and the multi-line values checked against
// its here-documents, each length-prefixed so no two inputs share a key.
func scriptKey(script string, multiline []string) [sha256.Size]byte {
	h := sha256.New()
	for _, v := range append([]string{script}, multiline...) {
		fmt.Fprintf(h, "%d:", len(v))
		hashString(h, v)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func parseAndCheckScript(name, script string, multiline []string) error {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), name)
	if err != nil {
		var pe syntax.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("bash cannot parse the rendered script: line %d, column %d: %s", pe.Pos.Line(), pe.Pos.Col(), pe.Text)
		}
		return fmt.Errorf("bash cannot parse the rendered script: %w", err)
	}
	type heredoc struct {
		word string
		dash bool
		line uint
	}
	var heredocs []heredoc
	var calls []*syntax.CallExpr
	syntax.Walk(file, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Redirect:
			if n.Op == syntax.Hdoc || n.Op == syntax.DashHdoc {
				heredocs = append(heredocs, heredoc{word: literal(n.Word), dash: n.Op == syntax.DashHdoc, line: n.Pos().Line()})
			}
		case *syntax.CallExpr:
			calls = append(calls, n)
		}
		return true
	})
	if len(heredocs) == 0 {
		return nil
	}
	words := make([]string, 0, len(heredocs))
	for _, h := range heredocs {
		words = append(words, h.word)
	}
	for _, c := range calls {
		if len(c.Args) > 0 && slices.Contains(words, literal(c.Args[0])) {
			return fmt.Errorf("line %d: the here-document delimiter %s stands where a command is: a here-document ended early, so what followed it would run as commands",
				c.Pos().Line(), literal(c.Args[0]))
		}
	}
	for _, h := range heredocs {
		for _, value := range multiline {
			for _, l := range strings.Split(value, "\n") {
				if h.dash {
					l = strings.TrimLeft(l, "\t")
				}
				if l == h.word {
					return fmt.Errorf("line %d: a context value has the line %s, which ends the here-document opened there", h.line, h.word)
				}
			}
		}
	}
	return nil
}

// literal is a word's text with its quotes removed; expansions count as
// nothing (a delimiter or command name with one is not a plain word).
func literal(w *syntax.Word) string {
	if w == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					b.WriteString(l.Value)
				}
			}
		}
	}
	return b.String()
}
