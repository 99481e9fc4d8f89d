package templates

import (
	"regexp"
	"strings"
)

// How the product decides that a change disrupts a node's workloads, in
// one place, for whoever must say so before a change rolls (the preview at
// apply time and the preview API; later the canary).
//
// On a node the decision is taken at run time, inside the steps: a step
// that is about to disrupt workloads calls bb-disruption-gate (Deckhouse's
// name for it, bb-deckhouse-get-disruptive-update-approval, too), which
// asks for the disruption approval and, in RollingUpdate mode, for the
// node's replacement; a step that needs a reboot sets the reboot flag
// (bb-flag-set reboot), and 099_reboot passes the gate for it. Before the
// change runs, the most that can be said is what a changed step may do: it
// is disruptive when its new script goes through the gate or asks for a
// reboot, or when it is the container runtime's or the kernel's step, whose
// changes reach every workload of the node whatever the script checks.

// disruptiveSteps are the built-in steps (by name without the NNN_ prefix
// and .sh) whose every change is disruptive, and why.
var disruptiveSteps = map[string]string{
	"containerd": "the container runtime changes",
	"kernel":     "the kernel's modules or settings change",
}

var (
	// gateCallRE is a call of the disruption gate as a shell word.
	gateCallRE = regexp.MustCompile(`(^|[\s;&|(!{])(bb-disruption-gate|bb-deckhouse-get-disruptive-update-approval)($|[\s;&|)}])`)
	// rebootFlagRE sets the reboot flag (not reboot-pending, which only
	// 099_reboot sets after the gate).
	rebootFlagRE = regexp.MustCompile(`(^|[\s;&|(!{])bb-flag-set\s+["']?reboot["']?($|[\s;&|)}])`)
)

// StepDisruption says why a change to the step file (a bundle step's
// name, such as 040_containerd.sh or 100_my-config.sh) whose new script is
// content may disrupt the node's workloads: one reason per cause, none
// when the change is not disruptive. Comment lines are not read.
func StepDisruption(file, content string) []string {
	var reasons []string
	if why, ok := disruptiveSteps[stepBaseName(file)]; ok {
		reasons = append(reasons, why)
	}
	gate, reboot := false, false
	for _, line := range strings.Split(content, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		gate = gate || gateCallRE.MatchString(line)
		reboot = reboot || rebootFlagRE.MatchString(line)
	}
	if gate {
		reasons = append(reasons, "it goes through the disruption gate (bb-disruption-gate)")
	}
	if reboot {
		reasons = append(reasons, "it asks for a reboot (bb-flag-set reboot)")
	}
	return reasons
}

// stepBaseName is a step file's name without its NNN_ prefix and .sh.
func stepBaseName(file string) string {
	name := strings.TrimSuffix(file, ".sh")
	if len(name) > 4 && name[3] == '_' && strings.Trim(name[:3], "0123456789") == "" {
		name = name[4:]
	}
	return name
}
