package templates

import (
	"strings"
	"testing"
)

// renderCustom renders one NodeGroupConfiguration for the worker group and
// returns its failures.
func renderCustom(t *testing.T, ctx Context, step CustomStep) []Failure {
	t.Helper()
	_, failures := builtinTree(t).Render(&ctx, []CustomStep{step})
	return failures
}

func wantCustomFailure(t *testing.T, failures []Failure, name string, wants ...string) {
	t.Helper()
	if len(failures) != 1 || failures[0].Custom != name {
		t.Fatalf("failures %v, want one attributed to %s", failures, name)
	}
	for _, want := range wants {
		if !strings.Contains(failures[0].Error(), want) {
			t.Errorf("failure %q does not say %q", failures[0].Error(), want)
		}
	}
}

func TestIndexOfAMissingKeyIsAnError(t *testing.T) {
	ctx := workerContext(t, nil)
	failures := renderCustom(t, ctx, CustomStep{Name: "labels.sh", Weight: 200,
		Content: "echo {{ index .nodeGroup.nodeTemplate.labels \"missing\" | squote }}"})
	wantCustomFailure(t, failures, "labels.sh", "line 1", `index`, `no key "missing"`)

	failures = renderCustom(t, ctx, CustomStep{Name: "range.sh", Weight: 200, Content: "echo\necho {{ index .normal.apiserverEndpoints 5 }}"})
	wantCustomFailure(t, failures, "range.sh", "line 2", "index 5 out of range")

	// What is there is still found, in maps, lists and nested.
	ctx.NodeGroup.NodeTemplate.Labels["zone"] = "a"
	b := mustRender(t, builtinTree(t), ctx, CustomStep{Name: "ok.sh", Weight: 200,
		Content: "echo {{ index .nodeGroup.nodeTemplate.labels \"zone\" }} {{ index .normal.apiserverEndpoints 0 }} {{ index . \"nodeGroup\" \"name\" }}"})
	if !strings.Contains(b.Steps["200_ok.sh"], "echo a 10.0.0.1:6443 worker") {
		t.Errorf("index found the wrong values:\n%s", b.Steps["200_ok.sh"])
	}
}

func TestCustomStepContentWithControlCharactersIsRefused(t *testing.T) {
	ctx := workerContext(t, nil)
	for name, content := range map[string]string{
		"nul.sh":    "echo a\x00001_wait_for_approval.sh\n",
		"escape.sh": "echo \x1b[2J",
		"cr.sh":     "echo a\r\n",
		"del.sh":    "echo \x7f",
	} {
		wantCustomFailure(t, renderCustom(t, ctx, CustomStep{Name: name, Weight: 200, Content: content}), name, "control character", "line 1")
	}
	// Tabs and line breaks are what scripts are made of.
	mustRender(t, builtinTree(t), ctx, CustomStep{Name: "tabs.sh", Weight: 200, Content: "if true; then\n\techo a\nfi\n"})
}

func TestCustomStepNamesAreBounded(t *testing.T) {
	ctx := workerContext(t, nil)
	name := strings.Repeat("a", MaxCustomStepNameLength+1)
	wantCustomFailure(t, renderCustom(t, ctx, CustomStep{Name: name, Weight: 200, Content: "true"}), name, "longer than")
	mustRender(t, builtinTree(t), ctx, CustomStep{Name: strings.Repeat("a", MaxCustomStepNameLength), Weight: 200, Content: "true"})
}

func TestCustomStepsThatBashCannotParseAreRefused(t *testing.T) {
	ctx := workerContext(t, nil)
	wantCustomFailure(t, renderCustom(t, ctx, CustomStep{Name: "broken.sh", Weight: 200,
		Content: "echo {{ .nodeGroup.name }}\nif true; then\n  echo a\n"}), "broken.sh", "bash", "line 2")
	wantCustomFailure(t, renderCustom(t, ctx, CustomStep{Name: "quote.sh", Weight: 200,
		Content: "echo 'unterminated\n"}), "quote.sh", "bash", "line 1")
}

func TestHereDocumentsThatWouldEndEarlyAreRefused(t *testing.T) {
	// What is left of a here-document a value ended runs as commands; its
	// real delimiter then stands where a command is.
	err := checkScript("s.sh", "cat <<'PEM' > ca.crt\nx\nPEM\ntouch /tmp/x\nPEM\n", nil)
	if err == nil || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "PEM") {
		t.Errorf("stray delimiter: %v", err)
	}
	// A multi-line value with a line equal to a delimiter of the script.
	value := "a\n\tTOML\nb"
	err = checkScript("s.sh", "cat <<-'TOML'\n\tkey = 1\n\tTOML\n", []string{value})
	if err == nil || !strings.Contains(err.Error(), "TOML") {
		t.Errorf("value with the delimiter line: %v", err)
	}
	if err := checkScript("s.sh", "cat <<'PEM'\n"+testCA+"PEM\necho PEM\n", []string{testCA}); err != nil {
		t.Errorf("a certificate in a here-document: %v", err)
	}
	// Through the renderer: a custom step whose here-document ends twice.
	failures := renderCustom(t, workerContext(t, nil), CustomStep{Name: "twice.sh", Weight: 200,
		Content: "cat <<EOF\n{{ .nodeGroup.name }}\nEOF\nEOF\n"})
	wantCustomFailure(t, failures, "twice.sh", "line 4", "EOF")
}
