package templates

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func fencedWith(mode, timeout string) func(*deckhousev1.NodeGroup) {
	return func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: mode}
		if timeout != "" {
			ng.Spec.Fencing.Watchdog = &deckhousev1.WatchdogSpec{Timeout: timeout}
		}
	}
}

// TestFencingContextConvertsTheTimeoutAndRefusesNonsense: the watchdog
// timeout reaches templates as written and in seconds, with the fencing
// agent's user; a timeout softdog cannot take fails the group's render with
// the field named.
func TestFencingContextConvertsTheTimeoutAndRefusesNonsense(t *testing.T) {
	settings, err := ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mode, timeout string
		want          Fencing
		err           string
	}{
		{"Watchdog", "", Fencing{Enabled: true, Mode: "Watchdog", WatchdogTimeout: "60s", WatchdogTimeoutSeconds: 60}, ""},
		{"", "", Fencing{Enabled: true, Mode: "Watchdog", WatchdogTimeout: "60s", WatchdogTimeoutSeconds: 60}, ""},
		{"Watchdog", "90s", Fencing{Enabled: true, Mode: "Watchdog", WatchdogTimeout: "90s", WatchdogTimeoutSeconds: 90}, ""},
		{"Watchdog", "2m", Fencing{Enabled: true, Mode: "Watchdog", WatchdogTimeout: "2m", WatchdogTimeoutSeconds: 120}, ""},
		{"Watchdog", "1h", Fencing{Enabled: true, Mode: "Watchdog", WatchdogTimeout: "1h", WatchdogTimeoutSeconds: 3600}, ""},
		{"Watchdog", "65535s", Fencing{Enabled: true, Mode: "Watchdog", WatchdogTimeout: "65535s", WatchdogTimeoutSeconds: 65535}, ""},
		{"Notify", "", Fencing{Enabled: true, Mode: "Notify", WatchdogTimeout: "60s", WatchdogTimeoutSeconds: 60}, ""},
		// Notify arms no softdog: its bound does not apply.
		{"Notify", "24h", Fencing{Enabled: true, Mode: "Notify", WatchdogTimeout: "24h", WatchdogTimeoutSeconds: 86400}, ""},
		{"Watchdog", "19h", Fencing{}, "spec.fencing.watchdog.timeout 19h is 68400 seconds, longer than the 65535 seconds"},
		{"Watchdog", "65536s", Fencing{}, "longer than the 65535 seconds"},
		{"Watchdog", "0s", Fencing{}, `spec.fencing.watchdog.timeout "0s" is not a whole number`},
		{"Watchdog", "60", Fencing{}, `"60" is not a whole number`},
		{"Watchdog", "1d", Fencing{}, `"1d" is not a whole number`},
		{"Watchdog", "1m30s", Fencing{}, `"1m30s" is not a whole number`},
		{"Notify", "99999999999999999999h", Fencing{}, "is too long"},
		{"Reboot", "", Fencing{}, `spec.fencing.mode "Reboot" is neither Watchdog nor Notify`},
	}
	for _, c := range cases {
		ng := staticGroup("fenced")
		fencedWith(c.mode, c.timeout)(ng)
		ctx, err := NewContext(ng, settings, nil, "")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("mode %q, timeout %q: want an error containing %q, got %v", c.mode, c.timeout, c.err, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("mode %q, timeout %q: %v", c.mode, c.timeout, err)
			continue
		}
		// Every fenced group's templates see the agent's user.
		c.want.AgentUID = deckhousev1.FencingAgentUID
		if *ctx.NodeGroup.Fencing != c.want {
			t.Errorf("mode %q, timeout %q: fencing %+v, want %+v", c.mode, c.timeout, *ctx.NodeGroup.Fencing, c.want)
		}
	}
}

// TestKernelPanicRebootIsOffOnlyInWatchdogMode: a node that a watchdog may
// panic stays down after a panic; every other node reboots 10 s after one.
func TestKernelPanicRebootIsOffOnlyInWatchdogMode(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*deckhousev1.NodeGroup)
		want   string
	}{
		{"no fencing", nil, "\nkernel.panic = 10\n"},
		{"Watchdog", fencedWith("Watchdog", ""), "\nkernel.panic = 0\n"},
		{"Notify", fencedWith("Notify", ""), "\nkernel.panic = 10\n"},
	} {
		step := mustRender(t, builtinTree(t), workerContext(t, c.mutate)).Steps["015_kernel.sh"]
		if strings.Count(step, "kernel.panic =") != 1 || !strings.Contains(step, c.want) {
			t.Errorf("%s: want %q once in 015_kernel:\n%s", c.name, strings.TrimSpace(c.want), step)
		}
	}
}

// watchdogMachine runs the fencing step's body with the real library, its
// machine paths (/etc, /sys, /dev) moved under a temporary root, and a
// modprobe that keeps the kernel's state there: /sys/module/softdog while
// softdog is loaded, its refcnt (1: the fencing agent holds the device),
// and /dev/watchdog as a regular file, root's with mode 0600 as the kernel
// makes it. Like the real one, it does nothing for a module already loaded,
// whatever the options, and refuses to unload one in use. With the file
// no-device in the root, softdog makes no device. udevadm, which would
// touch the host's devices, only records its calls (udevadm-calls).
//
// It runs as root: the step gives the device to another user (chown), as
// on a node.
type watchdogMachine struct {
	t          *testing.T
	dir, root  string
	lib, stubs string
}

const modprobeStub = `#!/bin/bash
set -Eeuo pipefail
echo "modprobe $*" >> "$STUB_ROOT/calls"
if [[ $1 == -r ]]; then
  module=$STUB_ROOT/sys/module/$2
  [[ -d $module ]] || { echo "modprobe: FATAL: Module $2 is not currently loaded." >&2; exit 1; }
  [[ $(< "$module/refcnt") == 0 ]] || { echo "modprobe: FATAL: Module $2 is in use." >&2; exit 1; }
  rm -rf "$module" "$STUB_ROOT/dev/watchdog"
  exit 0
fi
module=$STUB_ROOT/sys/module/$1
[[ ! -d $module ]] || exit 0
mkdir -p "$module" "$STUB_ROOT/dev"
echo 0 > "$module/refcnt"
[[ -e $STUB_ROOT/no-device ]] || (umask 077; : > "$STUB_ROOT/dev/watchdog")
`

const udevadmStub = `#!/bin/bash
set -Eeuo pipefail
echo "udevadm $*" >> "$STUB_ROOT/udevadm-calls"
`

func newWatchdogMachine(t *testing.T) *watchdogMachine {
	if os.Geteuid() != 0 {
		t.Skip("the fencing step's machine runs as root: the step gives the watchdog device to the fencing agent's user (make test runs as root)")
	}
	dir := t.TempDir()
	m := &watchdogMachine{t: t, dir: dir, root: filepath.Join(dir, "root"), lib: filepath.Join(dir, "lib.sh"), stubs: filepath.Join(dir, "stubs")}
	for _, d := range []string{m.root + "/var/lib/bashible", m.root + "/dev", m.stubs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, m.lib, libraryOf(t))
	for name, stub := range map[string]string{"modprobe": modprobeStub, "udevadm": udevadmStub} {
		writeFile(t, filepath.Join(m.stubs, name), stub)
		if err := os.Chmod(filepath.Join(m.stubs, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The machine's / is open to every user, as a real one: the agent's
	// user reaches the device through it.
	for _, d := range []string{filepath.Dir(dir), dir, m.root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// loadBy loads softdog as someone else would, or marks it in use.
func (m *watchdogMachine) softdog(loaded bool, refcnt string) {
	module := filepath.Join(m.root, "sys/module/softdog")
	if !loaded {
		if err := os.RemoveAll(module); err != nil {
			m.t.Fatal(err)
		}
		return
	}
	writeFile(m.t, filepath.Join(module, "refcnt"), refcnt+"\n")
}

// run renders the step for the group and runs its body; it returns the
// output, the modprobe calls and whether the step succeeded.
func (m *watchdogMachine) run(mutate func(*deckhousev1.NodeGroup)) (string, []string, bool) {
	t := m.t
	t.Helper()
	step := mustRender(t, builtinTree(t), workerContext(t, mutate)).Steps["017_fencing_watchdog.sh"]
	body := step[strings.Index(step, "\nfi\n")+len("\nfi\n"):] // after the machine-step header
	for _, p := range []string{"/etc/", "/sys/", "/run/", "/dev/watchdog"} {
		body = strings.ReplaceAll(body, p, m.root+p)
	}
	body = strings.ReplaceAll(body, "watchdog_device_wait_seconds=10", "watchdog_device_wait_seconds=1")
	writeFile(t, filepath.Join(m.dir, "step.sh"), body)
	_ = os.Remove(filepath.Join(m.root, "calls"))
	_ = os.Remove(filepath.Join(m.root, "udevadm-calls"))
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c", `set -Eeuo pipefail; source "$1"; cd "$2"; source "$3"`, "bashible",
		m.lib, m.root+"/var/lib/bashible", filepath.Join(m.dir, "step.sh"))
	cmd.Env = []string{"PATH=" + m.stubs + ":" + os.Getenv("PATH"), "BASHIBLE_ROOT=" + m.root, "STUB_ROOT=" + m.root,
		"BASHIBLE_STEP=017_fencing_watchdog.sh", "HOME=" + m.dir, "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	var calls []string
	if data, rerr := os.ReadFile(filepath.Join(m.root, "calls")); rerr == nil {
		calls = strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	return strings.ReplaceAll(string(out), m.root, ""), calls, err == nil
}

// udevCalls are the udevadm calls of the last run.
func (m *watchdogMachine) udevCalls() []string {
	data, err := os.ReadFile(filepath.Join(m.root, "udevadm-calls"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// device is the owner, group and mode of the machine's /dev/watchdog.
func (m *watchdogMachine) device() string {
	m.t.Helper()
	info, err := os.Stat(filepath.Join(m.root, "dev/watchdog"))
	if err != nil {
		m.t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d %#o", st.Uid, st.Gid, info.Mode().Perm())
}

// opensAs opens the machine's /dev/watchdog for writing, as the agent arms
// it, in a process of uid (its group the same, no other groups, no
// capabilities): nil when it could.
func (m *watchdogMachine) opensAs(uid int) error {
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c", `exec 3>> "$1"`, "open", filepath.Join(m.root, "dev/watchdog"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.ReplaceAll(strings.TrimSpace(string(out)), m.root, ""))
	}
	return nil
}

func (m *watchdogMachine) exists(path string) bool {
	_, err := os.Lstat(filepath.Join(m.root, path))
	return err == nil
}

func wantCalls(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: modprobe calls %q, want %q", what, got, want)
	}
}

// TestFencingWatchdogStepLoadsSoftdogOnceAndReloadsAStaleOne: softdog is
// loaded with the group's options and made to load at boot; a second run
// does nothing; a softdog loaded before by someone else, or whose device is
// gone, is reloaded; one in use is left running with a warning until it is
// free; a device that never comes fails the step clearly.
func TestFencingWatchdogStepLoadsSoftdogOnceAndReloadsAStaleOne(t *testing.T) {
	t.Parallel()
	twoMinutes := fencedWith("Watchdog", "2m")
	load := "modprobe softdog soft_margin=120 soft_panic=1"

	m := newWatchdogMachine(t)
	out, calls, ok := m.run(twoMinutes)
	if !ok {
		t.Fatalf("first run failed:\n%s", out)
	}
	wantCalls(t, "a machine without softdog", calls, load)
	for path, want := range map[string]string{
		"etc/modprobe.d/node-manager-softdog.conf":        "options softdog soft_margin=120 soft_panic=1\n",
		"etc/modules-load.d/node-manager-softdog.conf":    "\nsoftdog\n",
		"etc/udev/rules.d/10-node-manager-watchdog.rules": fmt.Sprintf(`KERNEL=="watchdog", OWNER:="%d", GROUP:="root", MODE:="0600"`, deckhousev1.FencingAgentUID) + "\n",
	} {
		if got := readFileT(t, filepath.Join(m.root, path)); !strings.Contains(got, want) {
			t.Errorf("/%s lacks %q:\n%s", path, want, got)
		}
	}
	if !m.exists("dev/watchdog") {
		t.Fatal("no /dev/watchdog after the first run")
	}
	out, calls, ok = m.run(twoMinutes)
	if !ok || len(calls) > 0 || strings.Contains(out, "wrote") {
		t.Errorf("the second run should change nothing (ok %v, calls %q):\n%s", ok, calls, out)
	}

	// The device removed (Deckhouse's 2026 bug): unloaded and loaded again.
	if err := os.Remove(filepath.Join(m.root, "dev/watchdog")); err != nil {
		t.Fatal(err)
	}
	out, calls, ok = m.run(twoMinutes)
	wantCalls(t, "a missing device", calls, "modprobe -r softdog", load)
	if !ok || !m.exists("dev/watchdog") || !strings.Contains(out, "unloaded softdog: /dev/watchdog is missing") {
		t.Errorf("a missing device should be made again by a reload (ok %v):\n%s", ok, out)
	}

	// A new timeout while the agent holds the device: a warning, the step
	// goes on, and the reload waits for a run where it is free.
	m.softdog(true, "1")
	out, calls, ok = m.run(fencedWith("Watchdog", "3m"))
	wantCalls(t, "a new timeout, in use", calls, "modprobe -r softdog")
	if !ok || !strings.Contains(out, "warning: softdog is loaded and it may run with other options than soft_margin=180 soft_panic=1, but it cannot be unloaded now") {
		t.Errorf("softdog in use should be left running with a warning (ok %v):\n%s", ok, out)
	}
	m.softdog(true, "0")
	_, calls, ok = m.run(fencedWith("Watchdog", "3m"))
	wantCalls(t, "a new timeout, free again", calls, "modprobe -r softdog", "modprobe softdog soft_margin=180 soft_panic=1")
	if !ok || m.exists("run/node-manager/softdog-reload-pending") {
		t.Errorf("the reload once free failed or is still pending (ok %v)", ok)
	}

	// A reload that waited is forgotten at a reboot, after which softdog
	// loaded at boot with the options file: in use again, nothing to say.
	m.softdog(true, "1")
	if _, _, ok = m.run(fencedWith("Watchdog", "4m")); !ok || !m.exists("run/node-manager/softdog-reload-pending") {
		t.Fatalf("a reload of softdog in use should wait, remembered in /run (ok %v)", ok)
	}
	if err := os.RemoveAll(filepath.Join(m.root, "run")); err != nil {
		t.Fatal(err)
	}
	out, calls, ok = m.run(fencedWith("Watchdog", "4m"))
	if !ok || len(calls) > 0 || strings.Contains(out, "warning") {
		t.Errorf("after a reboot softdog runs with the options file: nothing to do (ok %v, calls %q):\n%s", ok, calls, out)
	}

	// In use with its device gone: nothing can make it again.
	m.softdog(true, "1")
	if err := os.Remove(filepath.Join(m.root, "dev/watchdog")); err != nil {
		t.Fatal(err)
	}
	out, _, ok = m.run(fencedWith("Watchdog", "3m"))
	if ok || !strings.Contains(out, "/dev/watchdog is missing, and softdog cannot be unloaded") || !strings.Contains(out, "reboot the machine") {
		t.Errorf("a missing device of a softdog in use should fail the step saying what to do (ok %v):\n%s", ok, out)
	}

	// softdog loaded by someone else before the group was fenced, with
	// options unknown: reloaded with the group's.
	m = newWatchdogMachine(t)
	m.softdog(true, "0")
	writeFile(t, filepath.Join(m.root, "dev/watchdog"), "")
	_, calls, ok = m.run(twoMinutes)
	wantCalls(t, "softdog loaded before", calls, "modprobe -r softdog", load)
	if !ok {
		t.Error("reloading a softdog loaded before failed")
	}

	// A device that never comes: a bounded wait and a clear failure.
	m = newWatchdogMachine(t)
	writeFile(t, filepath.Join(m.root, "no-device"), "")
	out, _, ok = m.run(twoMinutes)
	if ok || !strings.Contains(out, "softdog is loaded, but /dev/watchdog did not appear within 1s") {
		t.Errorf("a device that never appears should fail the step after the wait (ok %v):\n%s", ok, out)
	}

	// Another watchdog is /dev/watchdog: said, not hidden.
	m = newWatchdogMachine(t)
	writeFile(t, filepath.Join(m.root, "sys/class/watchdog/watchdog0/identity"), "iTCO_wdt\n")
	out, _, ok = m.run(twoMinutes)
	if !ok || !strings.Contains(out, "warning: /dev/watchdog is the watchdog 'iTCO_wdt', not softdog") {
		t.Errorf("a hardware watchdog in softdog's place should be warned about (ok %v):\n%s", ok, out)
	}
}

// TestFencingWatchdogStepUndoesItselfWhenFencingGoes: a group that stops
// arming a watchdog (fencing removed, or mode Notify) loses the files the
// step wrote, and softdog is unloaded once it is free; a softdog this step
// never set up is left alone.
func TestFencingWatchdogStepUndoesItselfWhenFencingGoes(t *testing.T) {
	t.Parallel()
	for _, off := range []struct {
		name   string
		mutate func(*deckhousev1.NodeGroup)
	}{{"no fencing", nil}, {"Notify", fencedWith("Notify", "")}} {
		t.Run(off.name, func(t *testing.T) {
			m := newWatchdogMachine(t)
			if out, _, ok := m.run(fencedWith("Watchdog", "")); !ok {
				t.Fatalf("set-up failed:\n%s", out)
			}
			m.softdog(true, "1")
			out, calls, ok := m.run(off.mutate)
			wantCalls(t, "in use", calls, "modprobe -r softdog")
			if !ok || !strings.Contains(out, "softdog stays loaded until it is free") {
				t.Errorf("softdog in use should stay loaded, the step succeed (ok %v):\n%s", ok, out)
			}
			for _, gone := range []string{"etc/modprobe.d/node-manager-softdog.conf", "etc/modules-load.d/node-manager-softdog.conf", "etc/udev/rules.d/10-node-manager-watchdog.rules"} {
				if m.exists(gone) {
					t.Errorf("/%s is left", gone)
				}
			}
			m.softdog(true, "0")
			_, calls, ok = m.run(off.mutate)
			wantCalls(t, "free", calls, "modprobe -r softdog")
			if !ok || m.exists("sys/module/softdog") {
				t.Errorf("softdog should be unloaded once free (ok %v)", ok)
			}
			out, calls, ok = m.run(off.mutate)
			if !ok || len(calls) > 0 || strings.Contains(out, "removed") {
				t.Errorf("a run after the clean-up should change nothing (ok %v, calls %q):\n%s", ok, calls, out)
			}
		})
	}

	m := newWatchdogMachine(t)
	m.softdog(true, "0")
	if _, calls, ok := m.run(nil); !ok || len(calls) > 0 {
		t.Errorf("a softdog the step never set up must be left alone (ok %v, calls %q)", ok, calls)
	}
}

// TestFencingWatchdogStepGivesTheDeviceToTheAgent: in Watchdog mode
// /dev/watchdog is the fencing agent's (FencingAgentUID, its group root,
// mode 0600), by the udev rule and directly, on every run: a device the
// kernel made root's, one whose owner and mode someone widened, one made
// again by a reload. The agent's user (non-root, no capabilities) opens it;
// 64535, the user of node-manager's other images, does not. When the group
// stops arming a watchdog while the device stays, it is root's again and
// udev applies the rules that remain.
func TestFencingWatchdogStepGivesTheDeviceToTheAgent(t *testing.T) {
	t.Parallel()
	agent := deckhousev1.FencingAgentUID
	const otherImages = 64535
	agents, roots := fmt.Sprintf("%d:0 0600", agent), "0:0 0600"
	watchdog := fencedWith("Watchdog", "")
	reapply := []string{"udevadm control --reload", "udevadm trigger --action=add --sysname-match=watchdog*"}

	m := newWatchdogMachine(t)
	out, _, ok := m.run(watchdog)
	if !ok {
		t.Fatalf("first run failed:\n%s", out)
	}
	rule := readFileT(t, filepath.Join(m.root, "etc/udev/rules.d/10-node-manager-watchdog.rules"))
	if want := fmt.Sprintf(`KERNEL=="watchdog", OWNER:="%d", GROUP:="root", MODE:="0600"`, agent); !strings.Contains(rule, "\n"+want+"\n") {
		t.Errorf("the udev rule does not give /dev/watchdog to the agent (%s):\n%s", want, rule)
	}
	if want := `KERNEL=="watchdog?*", OWNER:="root", GROUP:="root", MODE:="0600"`; !strings.Contains(rule, "\n"+want+"\n") {
		t.Errorf("the udev rule should keep the other watchdog devices root's (%s):\n%s", want, rule)
	}
	if got := m.udevCalls(); !slices.Equal(got, reapply) {
		t.Errorf("a new rule should be loaded and applied: udevadm calls %q, want %q", got, reapply)
	}
	if got := m.device(); got != agents {
		t.Errorf("after the first run /dev/watchdog is %s, want %s (the agent's, mode 0600)", got, agents)
	}
	if err := m.opensAs(agent); err != nil {
		t.Errorf("the agent's user %d cannot open /dev/watchdog: %v", agent, err)
	}
	if err := m.opensAs(otherImages); err == nil {
		t.Errorf("user %d (node-manager's other images) can open /dev/watchdog: only the agent may arm it", otherImages)
	}

	out, _, ok = m.run(watchdog)
	if !ok || strings.Contains(out, "/dev/watchdog") || len(m.udevCalls()) > 0 || m.device() != agents {
		t.Errorf("the second run should change nothing (ok %v, udevadm %q, device %s):\n%s", ok, m.udevCalls(), m.device(), out)
	}

	// Widened by someone else (Deckhouse's rule gives it to its deckhouse
	// user, mode 0660): the agent's alone again.
	dev := filepath.Join(m.root, "dev/watchdog")
	if err := os.Chown(dev, otherImages, otherImages); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dev, 0o660); err != nil {
		t.Fatal(err)
	}
	out, _, ok = m.run(watchdog)
	if !ok || m.device() != agents || !strings.Contains(out, fmt.Sprintf("gave /dev/watchdog to the fencing agent's user %d, mode 0600", agent)) {
		t.Errorf("a widened device should be the agent's again, said so (ok %v, device %s):\n%s", ok, m.device(), out)
	}

	// Made again by a reload, root's as the kernel makes it: given again.
	if err := os.Remove(dev); err != nil {
		t.Fatal(err)
	}
	out, _, ok = m.run(watchdog)
	if !ok || m.device() != agents {
		t.Errorf("a device made again should be the agent's (ok %v, device %s):\n%s", ok, m.device(), out)
	}

	// The group stops arming a watchdog while the agent still holds
	// softdog: the device stays, root's again.
	for _, off := range []struct {
		name   string
		mutate func(*deckhousev1.NodeGroup)
	}{{"Notify", fencedWith("Notify", "")}, {"no fencing", nil}} {
		if _, _, ok := m.run(watchdog); !ok || m.device() != agents {
			t.Fatalf("%s: set-up failed (device %s)", off.name, m.device())
		}
		m.softdog(true, "1")
		out, _, ok = m.run(off.mutate)
		if !ok || m.device() != roots {
			t.Errorf("%s: /dev/watchdog is %s, want %s (root's again) (ok %v):\n%s", off.name, m.device(), roots, ok, out)
		}
		if got := m.udevCalls(); !slices.Equal(got, reapply) {
			t.Errorf("%s: udev should apply the rules that remain: udevadm calls %q, want %q", off.name, got, reapply)
		}
		if err := m.opensAs(agent); err == nil {
			t.Errorf("%s: the agent's user can still open /dev/watchdog", off.name)
		}
		out, _, ok = m.run(off.mutate)
		if !ok || len(m.udevCalls()) > 0 || strings.Contains(out, "gave /dev/watchdog") || m.device() != roots {
			t.Errorf("%s: the run after should change nothing (ok %v, udevadm %q):\n%s", off.name, ok, m.udevCalls(), out)
		}
		m.softdog(true, "0")
	}
}
