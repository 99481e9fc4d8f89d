package templates

import (
	"slices"
	"testing"
)

func TestStepDisruption(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []string
	}{
		{"a plain script", "100_sysctl.sh", "sysctl -w vm.swappiness=1\n", nil},
		{"the gate", "100_x.sh", "if changed; then\n  bb-disruption-gate\nfi\n",
			[]string{"it goes through the disruption gate (bb-disruption-gate)"}},
		{"Deckhouse's name for the gate", "100_x.sh", "bb-deckhouse-get-disruptive-update-approval && restart\n",
			[]string{"it goes through the disruption gate (bb-disruption-gate)"}},
		{"a reboot request", "100_x.sh", "bb-flag-set reboot\n",
			[]string{"it asks for a reboot (bb-flag-set reboot)"}},
		{"a quoted reboot request", "100_x.sh", "[[ -e /x ]] && bb-flag-set 'reboot'\n",
			[]string{"it asks for a reboot (bb-flag-set reboot)"}},
		{"the pending flag is not a request", "099_reboot.sh", "bb-flag-set reboot-pending\n", nil},
		{"another flag", "100_x.sh", "bb-flag-set apt-updated\n", nil},
		{"comments are not calls", "100_x.sh", "# calls bb-disruption-gate and bb-flag-set reboot\necho\n", nil},
		{"a longer name is not the gate", "100_x.sh", "bb-disruption-gate-x\n", nil},
		{"the containerd step", "040_containerd.sh", "echo\n", []string{"the container runtime changes"}},
		{"the kernel step", "015_kernel.sh", "echo\n", []string{"the kernel's modules or settings change"}},
		{"a custom step named kernel-tuning", "100_kernel-tuning.sh", "echo\n", nil},
		{"several reasons", "040_containerd.sh", "bb-disruption-gate\n",
			[]string{"the container runtime changes", "it goes through the disruption gate (bb-disruption-gate)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StepDisruption(tc.file, tc.content); !slices.Equal(got, tc.want) {
				t.Fatalf("StepDisruption(%q) = %q, want %q", tc.file, got, tc.want)
			}
		})
	}
}

// TestBuiltinDisruptiveStepsExistAndUseTheGate keeps the classification
// true to the tree: the steps it names disruptive exist, and the tree's
// steps that call the gate are found by it.
func TestBuiltinDisruptiveStepsExistAndUseTheGate(t *testing.T) {
	tree, err := LoadTree(Builtin())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range tree.steps {
		names[stepBaseName(s.name)] = true
		if s.name == "040_containerd.sh" || s.name == "060_kubelet.sh" || s.name == "099_reboot.sh" {
			if !slices.Contains(StepDisruption(s.name, s.text), "it goes through the disruption gate (bb-disruption-gate)") {
				t.Errorf("%s calls bb-disruption-gate, but StepDisruption does not see it", s.name)
			}
		}
	}
	for name := range disruptiveSteps {
		if !names[name] {
			t.Errorf("disruptiveSteps names %q, which is no built-in step", name)
		}
	}
}
