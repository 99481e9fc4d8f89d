package bashible

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// safeOnSimulatedNodes are the built-in steps the simulated nodes run for
// real, each with the reason it cannot touch the test machine.
var safeOnSimulatedNodes = map[string]string{
	"005_bashible_units.sh.tpl": "writes its units under BASHIBLE_ROOT and calls systemctl only when BASHIBLE_ROOT is empty",
	"099_reboot.sh.tpl":         "reboots through BASHIBLE_REBOOT_COMMAND, which the simulated nodes set to a recording command",
}

// TestOverlayStandsInForEveryMachineStep: the simulated nodes run bashible
// as the test machine's user with their root redirected, so every built-in
// step that changes a machine (kernel settings, packages, services) must
// have a harmless stand-in of the same name in the overlay, or be listed
// above with the reason it is safe. A new built-in step fails this test
// until it gets one, instead of running on the test machine.
func TestOverlayStandsInForEveryMachineStep(t *testing.T) {
	t.Parallel()
	builtin, err := os.ReadDir(filepath.Join(f.Root, "templates", "tree", "steps"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(f.OverlayDir(), "steps")
	for _, e := range builtin {
		name := e.Name()
		if !strings.HasSuffix(name, ".sh.tpl") {
			continue
		}
		if _, ok := safeOnSimulatedNodes[name]; ok {
			continue
		}
		if _, err := os.Stat(filepath.Join(overlay, name)); err != nil {
			t.Errorf("built-in step %s has no stand-in in %s: add a harmless one of the same name, or list it in safeOnSimulatedNodes with the reason it cannot touch the test machine", name, overlay)
		}
	}
	for name := range safeOnSimulatedNodes {
		if _, err := os.Stat(filepath.Join(f.Root, "templates", "tree", "steps", name)); err != nil {
			t.Errorf("safeOnSimulatedNodes lists %s, which is no built-in step: remove it", name)
		}
	}
}
