package rootfs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
)

// TestDebianFencedWorkerBundle runs the bundle of a worker group fenced in
// Watchdog mode with a two-minute timeout on Debian bookworm, on a machine
// where softdog is already loaded with other options and its device appears
// a second after it loads: the first run reloads softdog with
// soft_margin=120 and soft_panic=1, waits for the device, makes it load so
// at boot and turns off the reboot after a panic; the second run changes
// nothing; the device is the fencing agent's user's (mode 0600), which opens
// it while 64535 (node-manager's other images) cannot, on this machine
// without udev too; a removed /dev/watchdog (Deckhouse's bug of 2026) is made
// again by a reload, and given to the agent again; fencing removed, the next
// run takes it all away and the reboot after a panic comes back.
func TestDebianFencedWorkerBundle(t *testing.T) {
	w := newWorker(t)
	n, root := w.node, w.root
	fenced := func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog, Watchdog: &deckhousev1.WatchdogSpec{Timeout: "2m"}}
	}
	const load = "modprobe softdog soft_margin=120 soft_panic=1"

	// softdog loaded before, by someone else, with its own options.
	if out, err := debianroot.Run(t, root, nil, "modprobe softdog soft_margin=30 && test -e /dev/watchdog"); err != nil {
		t.Fatalf("loading softdog beforehand: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(root, "etc/stub-modprobe-device-delay"), "1\n", 0o644)

	bundle := n.render(fenced)
	n.install(bundle)
	out, calls, err := n.runSteps(bundle.Checksum)
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, tail(out, 60))
	}
	// Reloaded, after the kernel's modules; nothing loaded it again after.
	reload := slices.Index(calls, "modprobe -r softdog")
	if reload < 0 || reload+1 >= len(calls) || calls[reload+1] != load || slices.Index(calls, "modprobe overlay") > reload ||
		strings.Count(strings.Join(calls, "\n"), "modprobe softdog") != 1 {
		t.Errorf("softdog loaded before with other options should be unloaded, then loaded once with %q; calls: %q", load, calls)
	}
	if !strings.Contains(out, "unloaded softdog: it may run with other options") || !strings.Contains(out, "loaded softdog with soft_margin=120 soft_panic=1") {
		t.Errorf("the step should say it reloaded softdog:\n%s", tail(out, 40))
	}
	if _, err := os.Stat(filepath.Join(root, "dev/watchdog")); err != nil {
		t.Errorf("the step ended before the device appeared: %v", err)
	}
	if !slices.Contains(calls, "sysctl --quiet --load /etc/sysctl.d/90-node-manager.conf") {
		t.Errorf("the sysctl settings were not loaded; calls: %q", calls)
	}
	sysctl := framework.ReadFile(t, filepath.Join(root, "etc/sysctl.d/90-node-manager.conf"))
	if !strings.Contains(sysctl, "\nkernel.panic = 0\n") || strings.Contains(sysctl, "kernel.panic = 10") {
		t.Errorf("a fenced node must stay down after a panic (kernel.panic = 0):\n%s", sysctl)
	}
	for path, want := range map[string]string{
		"etc/modprobe.d/node-manager-softdog.conf":        "\noptions softdog soft_margin=120 soft_panic=1\n",
		"etc/modules-load.d/node-manager-softdog.conf":    "\nsoftdog\n",
		"etc/udev/rules.d/10-node-manager-watchdog.rules": fmt.Sprintf("\nKERNEL==\"watchdog\", OWNER:=\"%d\", GROUP:=\"root\", MODE:=\"0600\"\n", deckhousev1.FencingAgentUID),
	} {
		if got := framework.ReadFile(t, filepath.Join(root, path)); !strings.Contains(got, want) {
			t.Errorf("/%s lacks %q:\n%s", path, want, got)
		}
	}
	// Debian's root has no udev (a machine without it, or one where the
	// device came before the rule): the step itself gives the device.
	agentsDevice(t, root)

	// The second run changes nothing: no file, no module, no call.
	n.applied(bundle.Checksum)
	before := snapshot(t, root)
	out, calls, err = n.runSteps(bundle.Checksum)
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, tail(out, 60))
	}
	if changed := changedFiles(before, snapshot(t, root)); len(changed) > 0 {
		t.Errorf("the second run changed files: %v\n%s", changed, tail(out, 40))
	}
	if c := changes(calls); len(c) > 0 {
		t.Errorf("the second run made changing calls: %v", c)
	}
	if strings.Contains(out, "softdog") {
		t.Errorf("the second run did something to softdog:\n%s", out)
	}

	// /dev/watchdog removed while softdog stays loaded: modprobe alone
	// would do nothing; the step reloads it and the device is back.
	if err := os.Remove(filepath.Join(root, "dev/watchdog")); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, root)
	out, calls, err = n.runSteps(bundle.Checksum)
	if err != nil {
		t.Fatalf("run without the device: %v\n%s", err, tail(out, 60))
	}
	if c := changes(calls); !slices.Equal(c, []string{"modprobe -r softdog", load}) {
		t.Errorf("a missing device should be made again by a reload; calls: %q", c)
	}
	if _, err := os.Stat(filepath.Join(root, "dev/watchdog")); err != nil {
		t.Errorf("the device is not back: %v", err)
	}
	agentsDevice(t, root)
	if changed := changedFiles(before, snapshot(t, root)); len(changed) > 0 {
		t.Errorf("reloading softdog changed files: %v", changed)
	}

	// Fencing removed: the step's files go, softdog is unloaded (nothing
	// holds it here), and the node reboots after a panic again.
	plain := n.render(nil)
	n.install(plain)
	before = snapshot(t, root)
	out, calls, err = n.runSteps(plain.Checksum)
	if err != nil {
		t.Fatalf("run without fencing: %v\n%s", err, tail(out, 60))
	}
	changed := changedFiles(before, snapshot(t, root))
	slices.Sort(changed)
	if want := []string{
		"etc/modprobe.d/node-manager-softdog.conf (removed)", "etc/modules-load.d/node-manager-softdog.conf (removed)",
		"etc/sysctl.d/90-node-manager.conf", "etc/udev/rules.d/10-node-manager-watchdog.rules (removed)",
	}; !slices.Equal(changed, want) {
		t.Errorf("fencing removed changed files %v, want %v", changed, want)
	}
	if c := changes(calls); !slices.Equal(c, []string{"sysctl --quiet --load /etc/sysctl.d/90-node-manager.conf", "modprobe -r softdog"}) {
		t.Errorf("fencing removed made the calls %q, want the sysctl settings loaded and softdog unloaded", c)
	}
	if sysctl := framework.ReadFile(t, filepath.Join(root, "etc/sysctl.d/90-node-manager.conf")); !strings.Contains(sysctl, "\nkernel.panic = 10\n") {
		t.Errorf("without fencing a node reboots 10 s after a panic:\n%s", sysctl)
	}
	n.applied(plain.Checksum)
	before = snapshot(t, root)
	out, calls, err = n.runSteps(plain.Checksum)
	if err != nil {
		t.Fatalf("second run without fencing: %v\n%s", err, tail(out, 60))
	}
	if changed := changedFiles(before, snapshot(t, root)); len(changed) > 0 || len(changes(calls)) > 0 {
		t.Errorf("the run after fencing was removed changed files %v, made calls %q", changed, changes(calls))
	}
}

// agentsDevice checks that root's /dev/watchdog is the fencing agent's
// user's, group root, mode 0600, and that a process of that user (non-root,
// no capabilities, as the agent's container runs) opens it for writing, as
// the agent arms it, while one of user 64535 (node-manager's other images)
// cannot.
func agentsDevice(t *testing.T, root string) {
	t.Helper()
	info, err := os.Stat(filepath.Join(root, "dev/watchdog"))
	if err != nil {
		t.Fatalf("no /dev/watchdog: %v", err)
	}
	st := info.Sys().(*syscall.Stat_t)
	if got, want := fmt.Sprintf("%d:%d %#o", st.Uid, st.Gid, info.Mode().Perm()), fmt.Sprintf("%d:0 0600", deckhousev1.FencingAgentUID); got != want {
		t.Errorf("/dev/watchdog is %s, want %s (the fencing agent's, mode 0600)", got, want)
	}
	open := func(uid int) (string, error) {
		return debianroot.Run(t, root, nil, fmt.Sprintf("setpriv --reuid=%d --regid=%d --clear-groups --inh-caps=-all --bounding-set=-all bash -c 'exec 3>> /dev/watchdog'", uid, uid))
	}
	if out, err := open(deckhousev1.FencingAgentUID); err != nil {
		t.Errorf("the fencing agent's user %d cannot open /dev/watchdog: %v\n%s", deckhousev1.FencingAgentUID, err, out)
	}
	if out, err := open(64535); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("user 64535 (node-manager's other images) should be refused /dev/watchdog (err %v):\n%s", err, out)
	}
}
