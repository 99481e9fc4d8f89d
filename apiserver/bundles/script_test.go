package bundles

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// nodeScript is a script shaped like bashible.sh: a few lines that name
// the group, then a long library the same for every group.
func nodeScript(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/usr/bin/env bash\n# bashible of node group %s\nNODE_GROUP='%s'\n", group, group)
	for i := range 3000 {
		fmt.Fprintf(&b, "bb-function-%d() {\n  echo \"step %d of the library\"\n\n}\n", i, i*7)
	}
	fmt.Fprintf(&b, "BASHIBLE_NODE_GROUP='%s'\nmain \"$@\"", group)
	return b.String()
}

func TestAScriptIsTheTextItWasMadeOf(t *testing.T) {
	for name, text := range map[string]string{
		"empty":                      "",
		"one line, no line feed":     "echo a",
		"line feeds only":            strings.Repeat("\n", 5000),
		"a line longer than a piece": "#!/bin/sh\n" + strings.Repeat("x", 3*maxPiece) + "\necho done\n",
		"node script":                nodeScript("worker"),
	} {
		s := NewScript(text)
		if got := s.String(); got != text {
			t.Errorf("%s: String() gives %d bytes that differ from the %d made of", name, len(got), len(text))
		}
		if s.Len() != len(text) {
			t.Errorf("%s: Len() %d, want %d", name, s.Len(), len(text))
		}
		raw, err := json.Marshal(struct {
			S Script `json:"s"`
		}{s})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(struct {
			S string `json:"s"`
		}{text})
		if string(raw) != string(want) {
			t.Errorf("%s: encodes as %.80q, want the text's JSON string %.80q", name, raw, want)
		}
		var back struct {
			S Script `json:"s"`
		}
		if err := json.Unmarshal(raw, &back); err != nil || !back.S.Equal(s) {
			t.Errorf("%s: decoded back (%v): not equal to what was encoded", name, err)
		}
	}
}

// TestScriptsThatDifferInAFewLinesShareTheRest: two groups' scripts hold
// the library they have in common once, and equal scripts are equal.
func TestScriptsThatDifferInAFewLinesShareTheRest(t *testing.T) {
	a, b := NewScript(nodeScript("worker")), NewScript(nodeScript("a-group-with-a-longer-name"))
	if !a.Equal(NewScript(nodeScript("worker"))) {
		t.Error("two Scripts of the same text are not equal")
	}
	if a.Equal(b) {
		t.Error("two Scripts of different texts are equal")
	}
	held := map[string]bool{}
	distinct := 0
	for _, s := range []Script{a, b} {
		for _, p := range s.pieces {
			if !held[p.Value()] {
				held[p.Value()] = true
				distinct += len(p.Value())
			}
		}
	}
	if shared := a.Len() + b.Len() - distinct; shared < a.Len()*95/100 {
		t.Errorf("the two scripts (%d and %d bytes) share %d bytes; want nearly all of the library", a.Len(), b.Len(), shared)
	}
	if n := len(a.pieces); n < a.Len()/maxPiece || n > a.Len()/minPiece {
		t.Errorf("%d pieces for %d bytes", n, a.Len())
	}
}
