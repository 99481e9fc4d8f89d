package linediff

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEqualTextsHaveNoDiff(t *testing.T) {
	if got := Unified("a", "b", "x\ny\n", "x\ny\n"); got != "" {
		t.Fatalf("diff of equal texts: %q", got)
	}
}

func TestOneChangedLineShowsThreeLinesOfContext(t *testing.T) {
	old := "1\n2\n3\n4\n5\n6\n7\n8\n9\n"
	new := "1\n2\n3\n4\nfive\n6\n7\n8\n9\n"
	want := "--- a/s.sh\n+++ b/s.sh\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
	if got := Unified("a/s.sh", "b/s.sh", old, new); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestDistantChangesMakeSeparateHunks(t *testing.T) {
	var a, b []string
	for i := range 20 {
		a = append(a, string(rune('a'+i)))
		b = append(b, string(rune('a'+i)))
	}
	b[1], b[18] = "B", "S"
	got := Unified("x", "y", strings.Join(a, "\n")+"\n", strings.Join(b, "\n")+"\n")
	want := "--- x\n+++ y\n" +
		"@@ -1,5 +1,5 @@\n a\n-b\n+B\n c\n d\n e\n" +
		"@@ -16,5 +16,5 @@\n p\n q\n r\n-s\n+S\n t\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestCreatedAndDeletedFilesAreFromAndToDevNull(t *testing.T) {
	if got, want := Unified("a/n.sh", "b/n.sh", "", "echo hi\n"), "--- /dev/null\n+++ b/n.sh\n@@ -0,0 +1 @@\n+echo hi\n"; got != want {
		t.Fatalf("created: got %q, want %q", got, want)
	}
	if got, want := Unified("a/n.sh", "b/n.sh", "echo hi\n", ""), "--- a/n.sh\n+++ /dev/null\n@@ -1 +0,0 @@\n-echo hi\n"; got != want {
		t.Fatalf("deleted: got %q, want %q", got, want)
	}
}

func TestMissingFinalNewlineIsMarked(t *testing.T) {
	got := Unified("a", "b", "x\ny", "x\ny\n")
	want := "--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+y\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestInsertionInTheMiddleIsMinimal(t *testing.T) {
	got := Unified("a", "b", "1\n2\n3\n", "1\n2\nnew\n3\n")
	want := "--- a\n+++ b\n@@ -1,3 +1,4 @@\n 1\n 2\n+new\n 3\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// apply applies a unified diff produced by Unified to old, trusting only
// its hunk lines, so the test checks the patch, not the algorithm.
func apply(t *testing.T, old, patch string) string {
	t.Helper()
	a := splitLines(old)
	var out []string
	pos := 0
	lines := strings.SplitAfter(patch, "\n")
	for i := 2; i < len(lines); i++ {
		l := lines[i]
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "@@") {
			var as, al, bs, bl int
			if n, _ := scanRange(l, &as, &al, &bs, &bl); n == 0 {
				t.Fatalf("bad hunk header %q", l)
			}
			start := as - 1
			if al == 0 {
				start = as
			}
			out = append(out, a[pos:start]...)
			pos = start
			continue
		}
		text := l[1:]
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\\ ") {
			text = strings.TrimSuffix(text, "\n")
			i++
		}
		switch l[0] {
		case ' ':
			if a[pos] != text {
				t.Fatalf("context %q does not match line %d %q", text, pos+1, a[pos])
			}
			out = append(out, text)
			pos++
		case '-':
			if a[pos] != text {
				t.Fatalf("removed %q does not match line %d %q", text, pos+1, a[pos])
			}
			pos++
		case '+':
			out = append(out, text)
		default:
			t.Fatalf("unexpected line %q", l)
		}
	}
	out = append(out, a[pos:]...)
	return strings.Join(out, "")
}

func scanRange(header string, as, al, bs, bl *int) (int, error) {
	header = strings.TrimPrefix(header, "@@ -")
	header = strings.TrimSuffix(strings.TrimSpace(header), " @@")
	parts := strings.SplitN(header, " +", 2)
	parse := func(s string, start, length *int) {
		*length = 1
		if i := strings.IndexByte(s, ','); i >= 0 {
			*length = atoi(s[i+1:])
			s = s[:i]
		}
		*start = atoi(s)
	}
	parse(parts[0], as, al)
	parse(parts[1], bs, bl)
	return 1, nil
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestRandomEditsRoundTripAndAreShort applies the diff of random edits
// and checks it reproduces the new text with no more changed lines than
// the edits made.
func TestRandomEditsRoundTripAndAreShort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"a\n", "b\n", "c\n", "fi\n", "done\n", "x"}
	for iter := range 2000 {
		var old []string
		for range r.IntN(30) {
			old = append(old, words[r.IntN(len(words)-1)])
		}
		new := append([]string(nil), old...)
		edits := r.IntN(6)
		for range edits {
			switch i := r.IntN(len(new) + 1); {
			case r.IntN(2) == 0 && i < len(new):
				new = append(new[:i], new[i+1:]...)
			default:
				new = append(new[:i], append([]string{words[r.IntN(len(words)-1)]}, new[i:]...)...)
			}
		}
		if r.IntN(4) == 0 {
			new = append(new, "tail")
		}
		o, n := strings.Join(old, ""), strings.Join(new, "")
		patch := Unified("a", "b", o, n)
		if o == n {
			if patch != "" {
				t.Fatalf("iteration %d: diff of equal texts", iter)
			}
			continue
		}
		if got := apply(t, o, patch); got != n {
			t.Fatalf("iteration %d: patch of\n%q\nto\n%q\ngives\n%q\npatch:\n%s", iter, o, n, got, patch)
		}
		changed := 0
		for _, l := range strings.Split(patch, "\n")[2:] {
			if strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-") {
				changed++
			}
		}
		if limit := edits*2 + 2; changed > limit {
			t.Fatalf("iteration %d: %d changed lines for %d edits:\n%s", iter, changed, edits, patch)
		}
	}
}

func TestEditsBeyondTheBoundStillMakeACorrectPatch(t *testing.T) {
	var a, b strings.Builder
	for i := range MaxEdits {
		a.WriteString("old " + string(rune('0'+i%10)) + "\n")
		b.WriteString("new " + string(rune('0'+i%10)) + "\n")
	}
	patch := Unified("a", "b", a.String(), b.String())
	if got := apply(t, a.String(), patch); got != b.String() {
		t.Fatal("the bounded patch does not reproduce the new text")
	}
}
