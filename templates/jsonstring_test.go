package templates

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// bb-json-string builds the request bodies bashible sends (Events with a
// step's output, Instance conditions, the run's report) without a jq per
// field, so its escaping is what keeps a step's output from breaking or
// bending those documents. Every string, random bytes included, must come
// out as one JSON string that decodes to the text itself, or for text that
// is not UTF-8, to that text with the invalid bytes replaced.
func TestJSONStringEncodesAnyTextAsOneJSONString(t *testing.T) {
	t.Parallel()
	pieces := []string{"a", "Z", " ", "\\", "\"", "'", "&", "$", "`", "/", "\n", "\t", "\r", "\x00x", "\x01", "\x08", "\x0b", "\x0c",
		"\x1b[31m", "\x1f", "\x7f", "é", "日本", "\u2028", "\xff", "\xc3", "\xed\xa0\x80", "\\u0041", "%s", "%b", "\\x41", "}]"}
	rng := rand.New(rand.NewSource(1))
	texts := []string{"", "plain ascii", "ends with a newline\n\n", strings.Repeat("\\\"", 300)}
	for len(texts) < 600 {
		var b strings.Builder
		for n := rng.Intn(12); n > 0; n-- {
			b.WriteString(pieces[rng.Intn(len(pieces))])
		}
		texts = append(texts, b.String())
	}
	var input bytes.Buffer
	for _, text := range texts {
		// bash strings end at a NUL; bashible's texts (step output read by
		// grep and tail, names, messages) never hold one.
		input.WriteString(strings.ReplaceAll(text, "\x00", ""))
		input.WriteByte(0)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "var/lib/bashible"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "lib.sh"), libraryOf(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", `set -Eeuo pipefail; source "$1"
while IFS= read -r -d '' text; do bb-json-string quoted "$text"; printf '%s\n' "$quoted"; done`, "bashible", filepath.Join(dir, "lib.sh"))
	cmd.Env = append(os.Environ(), "LC_ALL=C", "BASHIBLE_ROOT="+root)
	cmd.Stdin = &input
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bb-json-string: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%d texts gave %d lines (a JSON string spans one line)", len(texts), len(lines))
	}
	for i, text := range texts {
		text = strings.ReplaceAll(text, "\x00", "")
		var got string
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Errorf("%q became %s, not a JSON string: %v", text, lines[i], err)
			continue
		}
		want := text
		if !utf8.ValidString(text) {
			if !utf8.ValidString(got) || strings.Count(got, "\uFFFD") == 0 {
				t.Errorf("%q (not UTF-8) became %q: want its invalid bytes replaced", text, got)
			}
			continue
		}
		if got != want {
			t.Errorf("%q became %s, which decodes to %q", text, lines[i], got)
		}
	}
}
