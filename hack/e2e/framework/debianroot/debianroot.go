// Package debianroot is a Debian bookworm root for e2e suites that run
// bundles as a machine would: built once by debootstrap (build-root.sh) and
// cached outside the repository, overlaid for each test, and entered as root
// in namespaces of its own (mount, PID, UTS, IPC): its /proc is fresh with
// /proc/sys read-only, its host name is its own, and every mount disappears
// with the namespaces, even when the test dies. What cannot exist there is
// stubbed, and only that: systemd (systemctl, and policy-rc.d so package
// scripts start no services), the commands that would change the host's
// kernel (modprobe, sysctl, swapon, swapoff, hostnamectl), and the machine's
// addresses (ip -j addr: the root shares the host's network). Each stub that
// changes something records its call in /var/log/stub-calls.log; modprobe
// also keeps what is loaded in the root's own /sys (no sysfs is mounted
// there), and softdog's /dev/watchdog as a regular file.
//
// A test's root can also be booted as a machine (Boot, machine.go): systemd as
// PID 1 under systemd-nspawn, nothing stubbed, so that what a bundle
// installs really runs; that is the join suite's.
package debianroot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/controlplane"
)

// debianMirror is where debootstrap and apt fetch packages while the root
// is built (never during a test run, which is offline).
func debianMirror() string {
	if m := os.Getenv("ROOTFS_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// cacheDir is where built roots are kept between runs, outside the repository.
func cacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "node-manager/rootfs"), nil
}

// cachedRoot returns a built Debian root for these base packages, building
// it once (under a lock) when the cache has none. The key covers the build
// script, the mirror and the package list; roots of other keys are removed.
func cachedRoot(t *testing.T, packages []string) string {
	t.Helper()
	repo, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(repo, "hack", "e2e", "framework", "debianroot", "build-root.sh")
	text, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", text, debianMirror(), strings.Join(packages, " "))
	key := "bookworm-" + hex.EncodeToString(h.Sum(nil))[:16]

	base, err := cacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()

	dir := filepath.Join(base, key)
	if _, err := os.Stat(filepath.Join(dir, "root", "etc", "os-release")); err == nil {
		return filepath.Join(dir, "root")
	}
	debootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/debootstrap"); serr != nil {
			t.Fatal("debootstrap is not installed; `make debian-tools` installs it from Debian packages")
		}
		debootstrap = "/usr/sbin/debootstrap"
	}
	fmt.Fprintf(os.Stderr, "rootfs: building the Debian root %s (cached in %s for later runs)\n", key, base)
	start := time.Now()
	building := filepath.Join(base, "building-"+key)
	if err := os.RemoveAll(building); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{script, building, debianMirror()}, packages...)...)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":"+filepath.Dir(debootstrap))
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(building)
		t.Fatalf("build-root.sh: %v\n%s", err, tail(string(out), 40))
	}
	if err := os.Rename(building, dir); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "rootfs: built the Debian root in %s\n", time.Since(start).Round(time.Second))
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		old := filepath.Join(base, e.Name())
		if e.IsDir() && e.Name() != key && strings.HasPrefix(e.Name(), "bookworm-") && !inUse(filepath.Join(old, "root")) {
			_ = os.RemoveAll(old)
		}
	}
	return filepath.Join(dir, "root")
}

// Fresh gives one test its own writable root: an overlay whose lower layer
// is the cached root, which nothing writes (what the test changes is copied
// up into a layer of its own), mounted at the returned path until the test
// ends. A copy of the 350 MB root took a second and as much written to disk
// per test. The overlay is mounted in the host's mount namespace, where
// the test reads and writes the root's files too; a test killed before its
// cleanup leaves it mounted, and the next Fresh on this machine removes it.
func Fresh(t *testing.T, packages []string) string {
	t.Helper()
	return overlay(t, cachedRoot(t, packages))
}

// overlay mounts a writable view of lower for the test (Fresh).
func overlay(t *testing.T, lower string) string {
	t.Helper()
	removeAbandoned(t)
	dir, err := mountOverlay(lower, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	t.Cleanup(func() {
		if left, err := mountedUnder(root); err != nil || len(left) > 0 {
			t.Errorf("left mounted under %s: %v %v", root, left, err)
		}
		if err := syscall.Unmount(root, 0); err != nil {
			t.Errorf("unmount the root's overlay %s: %v (a process of the test still uses it?); detached instead", root, err)
			_ = syscall.Unmount(root, syscall.MNT_DETACH)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	return root
}

// mountOverlay makes a temporary directory with the overlay's upper and
// work layers and its mount point, root, records the process owning it
// and mounts it over lower. It returns the directory.
func mountOverlay(lower string, owner int) (string, error) {
	dir, err := os.MkdirTemp("", overlayPrefix+"*")
	if err != nil {
		return "", err
	}
	root, upper, work := filepath.Join(dir, "root"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	err = func() error {
		// overlayfs splits its options at commas and its layer lists at colons.
		for _, d := range []string{lower, dir} {
			if strings.ContainsAny(d, ",:\\") {
				return fmt.Errorf("the root's overlay cannot name %q (a comma, colon or backslash in the path): set XDG_CACHE_HOME or TMPDIR to another directory", d)
			}
		}
		for _, d := range []string{root, upper, work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			return err
		}
		if err := syscall.Mount("overlay", root, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
			return fmt.Errorf("mount the root's overlay at %s over %s: %w (the kernel needs overlayfs)", root, lower, err)
		}
		return nil
	}()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// overlayPrefix names the temporary directories of Fresh's overlays.
const overlayPrefix = "debianroot-"

// removeAbandoned unmounts and removes the overlays of Fresh whose test
// process is gone (killed before its cleanup ran).
func removeAbandoned(t *testing.T) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), overlayPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // being set up, or not ours
		}
		pid, err := strconv.Atoi(string(owner))
		if err != nil || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		_ = syscall.Unmount(filepath.Join(dir, "root"), syscall.MNT_DETACH)
		_ = os.RemoveAll(dir)
	}
}

// A mount is one line of /proc/self/mountinfo: where it is mounted and
// its file system's options (an overlay's layers).
type mount struct{ point, options string }

func mountInfo() ([]mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mount
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// ID parent major:minor root point options [optional...] - type source super-options
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+3 >= len(fields) {
			continue
		}
		out = append(out, mount{point: unescapeMount(fields[4]), options: unescapeMount(fields[sep+3])})
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountedUnder lists what is mounted below dir (dir itself excluded).
func mountedUnder(dir string) ([]string, error) {
	mounts, err := mountInfo()
	var under []string
	for _, m := range mounts {
		if strings.HasPrefix(m.point, dir+"/") {
			under = append(under, m.point)
		}
	}
	return under, err
}

// inUse reports whether a mounted overlay has dir as a lower layer.
func inUse(dir string) bool {
	mounts, err := mountInfo()
	if err != nil {
		return true
	}
	for _, m := range mounts {
		if strings.Contains(","+m.options+",", ",lowerdir="+dir+",") {
			return true
		}
	}
	return false
}

// stubs stand in for what cannot exist in the root (see the package doc). Every one records its
// call in /var/log/stub-calls.log.
var stubs = map[string]string{
	// No systemd runs in the root: systemctl keeps units' enabled and
	// active state in files, so queries answer as systemd would.
	"usr/local/sbin/systemctl": `#!/bin/bash
echo "systemctl $*" >> /var/log/stub-calls.log
state=/var/lib/stub-systemd
mkdir -p "$state/enabled" "$state/active"
now=no
args=()
for a in "$@"; do
  case "$a" in
    --now) now=yes ;;
    -q|--quiet|--no-block) ;;
    *) args+=("$a") ;;
  esac
done
verb=${args[0]:-}
units=("${args[@]:1}")
for u in "${units[@]}"; do
  case "$verb" in
    is-enabled) [[ -e "$state/enabled/$u" ]] || exit 1 ;;
    is-active) [[ -e "$state/active/$u" ]] || exit 3 ;;
    enable) touch "$state/enabled/$u"; [[ $now == no ]] || touch "$state/active/$u" ;;
    disable) rm -f "$state/enabled/$u"; [[ $now == no ]] || rm -f "$state/active/$u" ;;
    start|restart|reload|reload-or-restart) touch "$state/active/$u" ;;
    stop) rm -f "$state/active/$u" ;;
    *) echo "systemctl stub: unsupported: $*" >&2; exit 1 ;;
  esac
done
case "$verb" in
  daemon-reload|reboot) ;;
  *) [[ ${#units[@]} -gt 0 ]] || { echo "systemctl stub: unsupported: $*" >&2; exit 1; } ;;
esac
`,
	// Debian's way to keep package scripts from starting services in a
	// root without an init system.
	"usr/sbin/policy-rc.d": "#!/bin/sh\necho \"policy-rc.d $*\" >> /var/log/stub-calls.log\nexit 101\n",
	// modprobe would change the host's kernel: recorded, not run. What is
	// loaded shows where the kernel shows it, in the root's own /sys (an
	// empty directory: no sysfs is mounted there): /sys/module/NAME, whose
	// refcnt a test sets to 1 for a module in use. Loading a loaded module
	// does nothing, whatever the options, and unloading one in use fails, as
	// with the real modprobe. softdog makes /dev/watchdog, a regular file
	// standing for the device, at once (devtmpfs makes it as the module
	// registers), or after the seconds in /etc/stub-modprobe-device-delay
	// ("never": no device).
	"usr/local/sbin/modprobe": `#!/bin/sh
echo "modprobe $*" >> /var/log/stub-calls.log
if [ "$1" = -r ]; then
  module=/sys/module/$2
  if [ ! -d "$module" ]; then
    echo "modprobe: FATAL: Module $2 is not currently loaded." >&2
    exit 1
  fi
  if [ "$(cat "$module/refcnt")" != 0 ]; then
    echo "modprobe: FATAL: Module $2 is in use." >&2
    exit 1
  fi
  rm -rf "$module"
  if [ "$2" = softdog ]; then rm -f /dev/watchdog; fi
  exit 0
fi
module=/sys/module/$1
if [ -d "$module" ]; then exit 0; fi
mkdir -p "$module"
echo 0 > "$module/refcnt"
if [ "$1" = softdog ]; then
  delay=$(cat /etc/stub-modprobe-device-delay 2> /dev/null || echo 0)
  case "$delay" in
    never) ;;
    0) : > /dev/watchdog ;;
    *) (sleep "$delay"; : > /dev/watchdog) > /dev/null 2>&1 & ;;
  esac
fi
`,
	// These would change the host's kernel too: recorded, not run. swapon
	// reports no swap.
	"usr/local/sbin/sysctl":      "#!/bin/sh\necho \"sysctl $*\" >> /var/log/stub-calls.log\n",
	"usr/local/sbin/swapon":      "#!/bin/sh\necho \"swapon $*\" >> /var/log/stub-calls.log\n",
	"usr/local/sbin/swapoff":     "#!/bin/sh\necho \"swapoff $*\" >> /var/log/stub-calls.log\n",
	"usr/local/sbin/hostnamectl": "#!/bin/sh\necho \"hostnamectl $*\" >> /var/log/stub-calls.log\n",
	// The root shares the host's network: the machine's addresses come
	// from /etc/stub-ip-addr.json, a machine with several networks (a query,
	// not recorded); every other use of ip is the real one.
	"usr/local/sbin/ip": `#!/bin/sh
if [ "$*" = "-j addr show up" ] && [ -f /etc/stub-ip-addr.json ]; then
  exec cat /etc/stub-ip-addr.json
fi
PATH=/usr/sbin:/usr/bin:/sbin:/bin exec ip "$@"
`,
}

// InstallStubs writes the stubs into root.
func InstallStubs(t *testing.T, root string) {
	t.Helper()
	for path, content := range stubs {
		WriteFile(t, filepath.Join(root, path), content, 0o755)
	}
}

// Run runs a bash script as root inside the root, in namespaces of
// its own, with a clean environment plus env.
func Run(t *testing.T, root string, env []string, script string) (string, error) {
	t.Helper()
	const enter = `root=$1; shift
mount -t proc proc "$root/proc"
mount --bind "$root/proc/sys" "$root/proc/sys"
mount -o remount,bind,ro "$root/proc/sys"
hostname e2e-worker
exec chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C "$@"`
	args := []string{"--mount", "--uts", "--ipc", "--pid", "--fork", "--propagation", "private",
		"bash", "-Eeuo", "pipefail", "-c", enter, "enter", root}
	args = append(args, env...)
	args = append(args, "bash", "-Eeuo", "pipefail", "-c", script)
	cmd := exec.Command("unshare", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// RequireRoot skips the test unless it runs as root, and fails it when a
// tool entering the root is missing.
func RequireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the rootfs suite builds and enters a Debian root: it runs as root (make test does, as CI does)")
	}
	for _, tool := range []string{"unshare", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil && !errors.Is(err, exec.ErrDot) {
			t.Fatalf("%s is needed: %v", tool, err)
		}
	}
}

// WriteFile writes a file into a root (directories created) with mode.
func WriteFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
