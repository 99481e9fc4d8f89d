// Package linediff computes line diffs and writes them in the unified
// format of diff -u and git diff, so a preview of a step's change reads
// like every other patch an operator has seen.
//
// The edit script is Myers' O(ND) shortest edit script over lines, after
// the common prefix and suffix are set aside (a step's change is usually a
// few lines in a long script, which makes D small). D is bounded
// (MaxEdits): past it the changed middle is reported as removed and added
// whole, which is still a correct patch, only not the shortest one, and
// costs no more than the two texts' length.
package linediff

import (
	"fmt"
	"strings"
)

// Context is the number of unchanged lines shown around each change, as
// diff -u shows by default.
const Context = 3

// MaxEdits bounds the number of inserted plus deleted lines Myers' search
// explores (its memory grows with the square of it).
const MaxEdits = 2000

// opKind is one line of an edit script.
type opKind byte

const (
	equal  opKind = ' '
	delete opKind = '-'
	insert opKind = '+'
)

type op struct {
	kind opKind
	// a and b are the line's index in the old and the new text (the one
	// that does not apply is the position it would have).
	a, b int
}

// Unified returns the unified diff of old and new under the file names
// oldName and newName, or "" when they are equal. An empty old (or new)
// text is a created (deleted) file: its name is /dev/null, as git writes
// it.
func Unified(oldName, newName, old, new string) string {
	if old == new {
		return ""
	}
	a, b := splitLines(old), splitLines(new)
	if old == "" {
		oldName = "/dev/null"
	}
	if new == "" {
		newName = "/dev/null"
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	for _, h := range hunks(script(a, b)) {
		writeHunk(&out, h, a, b)
	}
	return out.String()
}

// splitLines splits s into lines, each keeping its "\n"; a last line
// without one is kept as it is.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// script is an edit script turning a into b: every line of both, in order,
// as equal, deleted or inserted.
func script(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := make([]op, 0, len(a)+len(b))
	for i := 0; i < pre; i++ {
		ops = append(ops, op{equal, i, i})
	}
	ops = append(ops, middle(a[pre:len(a)-suf], b[pre:len(b)-suf], pre)...)
	for i := 0; i < suf; i++ {
		ops = append(ops, op{equal, len(a) - suf + i, len(b) - suf + i})
	}
	return ops
}

// middle is the shortest edit script of a and b (offset lines into both
// texts), or, past MaxEdits, all of a deleted and all of b inserted.
func middle(a, b []string, offset int) []op {
	n, m := len(a), len(b)
	maxD := n + m
	if maxD > MaxEdits {
		maxD = MaxEdits
	}
	// v[k+maxD] is the furthest x reached on diagonal k = x-y; trace keeps
	// v after each d, for the walk back.
	v := make([]int, 2*maxD+2)
	var trace [][]int
	found := -1
	for d := 0; d <= maxD && found < 0; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[k-1+maxD] < v[k+1+maxD]) {
				x = v[k+1+maxD] // down: an insertion
			} else {
				x = v[k-1+maxD] + 1 // right: a deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[k+maxD] = x
			if x >= n && y >= m {
				found = d
				break
			}
		}
		trace = append(trace, append([]int(nil), v...))
	}
	if found < 0 {
		ops := make([]op, 0, n+m)
		for i := range n {
			ops = append(ops, op{delete, offset + i, offset})
		}
		for j := range m {
			ops = append(ops, op{insert, offset + n, offset + j})
		}
		return ops
	}
	// Walk back from (n, m), collecting the script in reverse.
	var rev []op
	x, y := n, m
	for d := found; d > 0; d-- {
		prev := trace[d-1]
		k := x - y
		var pk int
		if k == -d || (k != d && prev[k-1+maxD] < prev[k+1+maxD]) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := prev[pk+maxD]
		py := px - pk
		for x > px && y > py {
			// The snake after the edit: equal lines.
			rev = append(rev, op{equal, offset + x - 1, offset + y - 1})
			x, y = x-1, y-1
		}
		if pk == k+1 {
			rev = append(rev, op{insert, offset + px, offset + py})
		} else {
			rev = append(rev, op{delete, offset + px, offset + py})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		rev = append(rev, op{equal, offset + x - 1, offset + y - 1})
		x, y = x-1, y-1
	}
	ops := make([]op, len(rev))
	for i, o := range rev {
		ops[len(rev)-1-i] = o
	}
	return ops
}

// hunk is a run of the script with its context.
type hunk []op

// hunks groups the changes of ops with Context lines around each; changes
// closer than twice Context share a hunk.
func hunks(ops []op) []hunk {
	var out []hunk
	for i := 0; i < len(ops); {
		if ops[i].kind == equal {
			i++
			continue
		}
		start := max(i-Context, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != equal {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == equal {
				run++
			}
			if run == len(ops) || run-end > 2*Context {
				end = min(end+Context, len(ops))
				break
			}
			end = run
		}
		out = append(out, hunk(ops[start:end]))
		i = end
	}
	return out
}

func writeHunk(out *strings.Builder, h hunk, a, b []string) {
	aStart, bStart, aLen, bLen := h[0].a, h[0].b, 0, 0
	for _, o := range h {
		if o.kind != insert {
			aLen++
		}
		if o.kind != delete {
			bLen++
		}
	}
	fmt.Fprintf(out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
	for _, o := range h {
		line := ""
		switch o.kind {
		case insert:
			line = b[o.b]
		default:
			line = a[o.a]
		}
		out.WriteByte(byte(o.kind))
		out.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			out.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange is a hunk header's range: 1-based start and length, with the
// length left out when it is 1, and the start the line before when the
// range is empty — as diff -u writes them.
func hunkRange(start, length int) string {
	switch length {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, length)
}
