package admission

import (
	"fmt"
	"strings"

	"github.com/node-manager/node-manager/apiserver/preview"
)

// maxWarningRunes keeps each warning under what kube-apiserver passes on
// whole (it truncates longer ones).
const maxWarningRunes = 250

// warningPrefix starts every warning, so a reader of `kubectl apply`
// knows where it comes from.
const warningPrefix = "bashible preview: "

// Decision is the webhook's answer.
type Decision struct {
	// Allowed is false only for a NodeGroupConfiguration that does not
	// render.
	Allowed bool
	// Message says why it was refused.
	Message  string
	Warnings []string
}

// Decide turns a preview of the proposal into the answer kube-apiserver
// passes on: a refusal when the proposal's own NodeGroupConfiguration does
// not render (naming every group and message), otherwise warnings saying
// which groups change, with their node counts and changed steps, and
// whether the change is disruptive. A preview that could not run (err)
// admits the object with a warning saying so: the webhook informs, and
// never blocks the cluster.
func Decide(p preview.Proposal, res *preview.Result, err error) Decision {
	if err != nil {
		return Decision{Allowed: true, Warnings: []string{warning("not available (%s); the change is admitted without a preview", err)}}
	}
	if own := res.ProposalFailures(p); len(own) > 0 {
		var groups, messages []string
		seen := map[string]bool{}
		for _, f := range own {
			groups = append(groups, f.Group)
			if !seen[f.Message] {
				seen[f.Message] = true
				messages = append(messages, oneLine(f.Message))
			}
		}
		return Decision{Message: fmt.Sprintf("NodeGroupConfiguration %s does not render for node group %s: %s",
			p.Config.Name, strings.Join(groups, ", "), strings.Join(messages, "; "))}
	}
	d := Decision{Allowed: true}
	if len(res.Groups) == 0 {
		d.Warnings = append(d.Warnings, warning("no node group's bundle changes"))
	}
	var disruptive []string
	for _, g := range res.Groups {
		if g.Disruptive {
			disruptive = append(disruptive, g.Group)
		}
	}
	if len(res.Groups) > 0 {
		summary := fmt.Sprintf("%d node group(s) change, %d of them disruptively", len(res.Groups), len(disruptive))
		if len(disruptive) > 0 {
			summary += " (" + strings.Join(disruptive, ", ") + ")"
		}
		d.Warnings = append(d.Warnings, warning("%s", summary))
	}
	for _, g := range res.Groups {
		d.Warnings = append(d.Warnings, groupWarnings(g)...)
	}
	for _, f := range res.Failures {
		at := ""
		if f.Config != "" {
			at = " (NodeGroupConfiguration " + f.Config + ")"
		}
		d.Warnings = append(d.Warnings, warning("group %s does not render%s and keeps its last good bundle: %s", f.Group, at, oneLine(f.Message)))
	}
	if len(res.Groups) > 0 {
		d.Warnings = append(d.Warnings, warning("the full diff: kubectl create -o yaml -f with a NodeGroupBundlePreview (see docs/operations/preview.md)"))
	}
	return d
}

// groupWarnings are one group's lines: its nodes, its changed steps and
// whether the change is disruptive; then, for each disruptive step, why.
func groupWarnings(g preview.GroupChange) []string {
	if g.PreviousChecksum == "" {
		// Nothing was published for the group yet: its nodes take the
		// whole bundle at their first run, which passes every gate.
		return []string{warning("group %s, %d node(s): not published yet; its first bundle has %d file(s)", g.Group, g.NodeCount, len(g.Steps))}
	}
	steps := make([]string, 0, len(g.Steps))
	var why []string
	for _, s := range g.Steps {
		steps = append(steps, fmt.Sprintf("%s (%s)", s.Name, strings.ToLower(string(s.Change))))
		if len(s.Disruption) > 0 {
			why = append(why, warning("group %s: %s may disrupt workloads: %s", g.Group, s.Name, strings.Join(s.Disruption, "; ")))
		}
	}
	verdict := "not disruptive"
	if g.Disruptive {
		verdict = fmt.Sprintf("DISRUPTIVE (approvalMode %s)", g.ApprovalMode)
	}
	return append([]string{warning("group %s, %d node(s): %d step(s) change: %s; %s", g.Group, g.NodeCount, len(g.Steps), strings.Join(steps, ", "), verdict)}, why...)
}

// warning formats one warning: prefixed, on one line, and short enough to
// reach the user whole (a longer one ends with "...").
func warning(format string, args ...any) string { return prefixed(warningPrefix, format, args...) }

// prefixed is one warning after prefix, on one line and at most
// maxWarningRunes long.
func prefixed(prefix, format string, args ...any) string {
	w := []rune(oneLine(prefix + fmt.Sprintf(format, args...)))
	if len(w) > maxWarningRunes {
		w = append(w[:maxWarningRunes-3], []rune("...")...)
	}
	return string(w)
}

// oneLine replaces line breaks and other control characters, which a
// warning (an HTTP header) cannot carry.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
