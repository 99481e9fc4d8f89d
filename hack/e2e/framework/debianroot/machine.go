package debianroot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A Machine is a Debian root booted by systemd-nspawn (Debian's
// systemd-container) with systemd as PID 1, so that what the bundle
// installs really runs: containerd, the kubelet, the API proxy,
// bashible.timer. It shares the host's network, so it reaches the control
// plane on loopback and its kubelet registers with the host's address.
//
// What makes it boot on a host like the test machine (cgroup v1, no
// systemd as PID 1, no CAP_SYS_RESOURCE) is the harness's, never the
// product's:
//   - --keep-unit --register=no: there is no systemd on the host to ask for
//     a scope;
//   - PID 1 is nm-init, which remounts the cgroup v1 controllers read-write
//     (nspawn mounts them read-only, and systemd then manages none) and
//     execs systemd;
//   - SYSTEMD_SECCOMP=0: nspawn's seccomp filter refuses the keyring calls
//     runc makes for every container;
//   - --capability=all, --bind=/dev/kmsg (the kubelet exits without it);
//   - SYSTEMD_NSPAWN_API_VFS_WRITABLE=1: /proc/sys is writable, so the
//     bundle's sysctl settings and the kubelet's kernel tunables take; they
//     are host-global, so Boot records them and puts them back.
//
// Everything the machine leaves on the host is taken away when the test
// ends, and the test fails if anything is left: processes rooted in the
// machine, mounts under its root, cgroups, network links, iptables rules,
// sysctl values, nspawn's state under /run/systemd/nspawn.
type Machine struct {
	// Root is the machine's root directory on the host; Name its host name.
	Root, Name string

	t       *testing.T
	cmd     *exec.Cmd
	console *bytes.Buffer
	mu      sync.Mutex
	exited  chan struct{}
	pid1    int
}

// hostSysctls are the host-global keys a joining node writes: the bundle's
// kernel step (/etc/sysctl.d/90-node-manager.conf), the kubelet's kernel
// tunables, and what the CNI bridge plugin turns on. Boot records them and
// the cleanup puts them back; a key written that is not here fails the test.
var hostSysctls = []string{
	"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding",
	"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.netfilter.nf_conntrack_max",
	"fs.inotify.max_user_watches", "fs.inotify.max_user_instances", "fs.file-max", "vm.max_map_count", "kernel.pid_max",
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops", "vm.swappiness",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// nmInit is the machine's PID 1 (see Machine).
const nmInit = `#!/bin/sh
# PID 1 of a test machine: the cgroup v1 controllers read-write, then systemd.
for m in /sys/fs/cgroup/*; do
  case "$m" in */unified|*/systemd) continue ;; esac
  mount -o remount,bind,rw "$m"
done
exec /lib/systemd/systemd "$@"
`

// builtinModules are the modules the bundle loads, which the test kernel
// has built in (it has no loadable modules): listed in modules.builtin,
// modprobe finds them loaded, as on a kernel that builds them in.
var builtinModules = []string{"kernel/fs/overlayfs/overlay.ko", "kernel/net/bridge/br_netfilter.ko", "kernel/net/netfilter/nf_conntrack.ko"}

// Boot prepares root as a stock Debian machine named name and boots it;
// it is halted and everything it left is removed when the test ends.
// Preparing: kmod, which every Debian install has (the minimal root lacks
// it, and the bundle's kernel step runs modprobe before the base packages),
// installed from the root's .deb files; this kernel's built-in modules
// listed for modprobe; the host name and the host's resolv.conf; sshd
// masked.
func Boot(t *testing.T, root, name string) *Machine {
	t.Helper()
	RequireRoot(t)
	for _, tool := range []string{"systemd-nspawn", "nsenter", "iptables-save", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to boot a test machine (`make debian-tools` installs it): %v", tool, err)
		}
	}
	release, err := kernelRelease()
	if err != nil {
		t.Fatal(err)
	}
	WriteFile(t, filepath.Join(root, "usr/local/sbin/nm-init"), nmInit, 0o755)
	WriteFile(t, filepath.Join(root, "etc/hostname"), name+"\n", 0o644)
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	WriteFile(t, filepath.Join(root, "etc/resolv.conf"), string(resolv), 0o644)
	WriteFile(t, filepath.Join(root, "lib/modules", release, "modules.builtin"), strings.Join(builtinModules, "\n")+"\n", 0o644)
	// The root has openssh-server for the caps suite's hosts; this machine
	// shares the host's network, so its sshd would listen on the host's
	// port 22: the unit is masked.
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/ssh.service")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	if out, err := Run(t, root, nil, "dpkg -i /var/cache/apt/archives/kmod_*.deb > /dev/null && depmod "+release); err != nil {
		t.Fatalf("install kmod in the machine: %v\n%s", err, out)
	}

	disk := mountDisk(t)
	m := &Machine{Root: root, Name: name, t: t, console: &bytes.Buffer{}, exited: make(chan struct{})}
	before := m.snapshotHost()
	t.Cleanup(func() { m.cleanUp(before) })

	m.cmd = exec.Command("systemd-nspawn", "-D", root, "--register=no", "--keep-unit", "--console=passive",
		"--machine="+name, "--capability=all", "--bind=/dev/kmsg",
		"--bind="+filepath.Join(disk, "containerd")+":/var/lib/containerd", "--bind="+filepath.Join(disk, "kubelet")+":/var/lib/kubelet",
		"/usr/local/sbin/nm-init")
	m.cmd.Env = append(os.Environ(), "SYSTEMD_SECCOMP=0", "SYSTEMD_NSPAWN_API_VFS_WRITABLE=1")
	m.cmd.Stdout, m.cmd.Stderr = m, m
	start := time.Now()
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()
	var state string
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-m.exited:
			return false, errors.New("systemd-nspawn exited")
		default:
		}
		if m.pid1 == 0 {
			m.pid1 = m.findInit()
			return false, nil
		}
		out, _ := m.Run(context.Background(), "systemctl is-system-running || true")
		state = strings.TrimSpace(out)
		return state == "running" || state == "degraded", nil
	})
	if err != nil {
		t.Fatalf("the machine did not boot (last state %q): %v\nconsole:\n%s", state, err, tail(m.Console(), 40))
	}
	t.Logf("booted machine %s in %s (systemd: %s)", name, time.Since(start).Round(100*time.Millisecond), state)
	return m
}

// diskSize is the size of a machine's own disk. The file behind it is
// sparse: the host pays only for what the machine writes.
const diskSize = "32G"

// mountDisk gives the machine a disk of its own, an ext4 file system on a
// sparse file, mounted on the host and unmounted once the machine has
// halted (the cleanup is registered before the machine's, so it runs after
// it). The kubelet's node file system (/var/lib/kubelet) and containerd's
// image file system (/var/lib/containerd) lie on it, as on a node's disk:
// the kubelet measures its eviction thresholds (5% and 10% free) against
// the machine's disk, not against the shared disk of the host running the
// tests, whose free space is not the test's to decide. It also keeps
// containerd's overlayfs snapshotter off the root's own overlay (Fresh),
// where it cannot lie.
func mountDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "disk")
	if err := os.Mkdir(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"truncate", "-s", diskSize, img},
		{"mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", img},
		{"mount", "-o", "loop", img, mnt},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("the test machine's disk: %s: %v\n%s(it needs e2fsprogs and a loop device: /dev/loop-control)", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("unmount the test machine's disk %s: %v\n%s", mnt, err, out)
		}
	})
	for _, sub := range []string{"containerd", "kubelet"} {
		if err := os.Mkdir(filepath.Join(mnt, sub), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return mnt
}

// Write collects nspawn's console.
func (m *Machine) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.console.Write(p)
}

// Console is what the machine printed on its console so far.
func (m *Machine) Console() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.console.String()
}

// findInit is the machine's PID 1 seen from the host: the descendant of
// nspawn that is PID 1 of its own PID namespace and runs systemd, 0 while
// there is none (found by ancestry, not by name, since other machines may
// run systemd too).
func (m *Machine) findInit() int {
	queue := []int{m.cmd.Process.Pid}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err == nil && pid != m.cmd.Process.Pid {
			for _, line := range strings.Split(string(status), "\n") {
				if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
					if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "systemd" {
						return pid
					}
				}
			}
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, task := range tasks {
			children, _ := os.ReadFile(task)
			for _, c := range strings.Fields(string(children)) {
				if n, err := strconv.Atoi(c); err == nil {
					queue = append(queue, n)
				}
			}
		}
	}
	return 0
}

// Run runs a bash script as root inside the machine (all of its
// namespaces, a clean environment plus env) and returns its combined
// output; ctx bounds it.
func (m *Machine) Run(ctx context.Context, script string, env ...string) (string, error) {
	args := []string{"-t", strconv.Itoa(m.pid1), "-a", "-r", "-w", "/usr/bin/env", "-i",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C"}
	args = append(args, env...)
	args = append(args, "bash", "-Eeuo", "pipefail", "-c", script)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// MustRun is Run bounded at a minute; the test fails when the script does.
func (m *Machine) MustRun(script string) string {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := m.Run(ctx, script)
	if err != nil {
		m.t.Fatalf("in machine %s: %v\n%s\n%s", m.Name, err, script, out)
	}
	return out
}

// hostState is what the cleanup compares: host state a machine may change.
type hostState struct {
	sysctls  map[string]string
	cgroups  map[string][]string
	links    []string
	iptables map[string]string
	nspawn   bool
}

func (m *Machine) snapshotHost() hostState {
	t := m.t
	t.Helper()
	s := hostState{sysctls: map[string]string{}, cgroups: map[string][]string{}, iptables: map[string]string{}}
	for _, key := range hostSysctls {
		if v, err := os.ReadFile(sysctlPath(key)); err == nil {
			s.sysctls[key] = strings.TrimSpace(string(v))
		}
	}
	for dir := range cgroupDirs(t) {
		s.cgroups[dir] = subdirs(dir)
	}
	s.links = links(t)
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		s.iptables[cmd] = iptablesDump(cmd)
	}
	_, err := os.Stat("/run/systemd/nspawn")
	s.nspawn = err == nil
	return s
}

// cleanUp halts the machine and removes what it left on the host; what
// cannot be removed fails the test.
func (m *Machine) cleanUp(before hostState) {
	t := m.t
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(60 * time.Second):
			t.Errorf("machine %s did not halt within 60 s of SIGTERM: killed\nconsole:\n%s", m.Name, tail(m.Console(), 30))
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	// No process may be left rooted in the machine.
	procs, _ := filepath.Glob("/proc/[0-9]*/root")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && (target == m.Root || strings.HasPrefix(target, m.Root+"/")) {
			comm, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "comm"))
			t.Errorf("process %s (%s) is left running in machine %s", filepath.Base(filepath.Dir(p)), strings.TrimSpace(string(comm)), m.Name)
		}
	}
	// Cgroups the machine made: removed deepest first; one still holding
	// a process is reported.
	var removed []string
	defer func() { t.Logf("removed the %d cgroups machine %s made", len(removed), m.Name) }()
	for dir, old := range before.cgroups {
		for _, sub := range subdirs(dir) {
			if slices.Contains(old, sub) {
				continue
			}
			if err := removeCgroup(filepath.Join(dir, sub)); err != nil {
				t.Errorf("cgroup left by machine %s: %v", m.Name, err)
			} else {
				removed = append(removed, filepath.Join(dir, sub))
			}
		}
	}
	// Network links (the CNI bridge, veths) in the host's namespace.
	for _, link := range links(t) {
		if !slices.Contains(before.links, link) {
			if out, err := exec.Command("ip", "link", "del", link).CombinedOutput(); err != nil {
				t.Errorf("remove link %s left by machine %s: %v\n%s", link, m.Name, err, out)
			}
		}
	}
	// iptables rules and chains (the kubelet's in the host's namespace).
	for cmd, old := range before.iptables {
		if err := restoreIptables(cmd, old); err != nil {
			t.Errorf("iptables left by machine %s: %v", m.Name, err)
		}
	}
	for key, old := range before.sysctls {
		if err := os.WriteFile(sysctlPath(key), []byte(old), 0o644); err != nil {
			t.Errorf("restore host sysctl %s=%s: %v", key, old, err)
		}
	}
	// Keys the machine's sysctl settings name must all have been restored.
	confs, _ := filepath.Glob(filepath.Join(m.Root, "etc/sysctl.d/*.conf"))
	for _, conf := range confs {
		data, _ := os.ReadFile(conf)
		for _, line := range strings.Split(string(data), "\n") {
			key, _, ok := strings.Cut(line, "=")
			key = strings.TrimSpace(key)
			if ok && key != "" && !strings.HasPrefix(key, "#") && !slices.Contains(hostSysctls, key) {
				t.Errorf("machine %s set host sysctl %s (%s), which the harness does not restore: add it to hostSysctls", m.Name, key, conf)
			}
		}
	}
	if !before.nspawn {
		_ = os.RemoveAll("/run/systemd/nspawn")
	} else {
		_ = os.RemoveAll(filepath.Join("/run/systemd/nspawn/propagate", m.Name))
	}
	if left, err := mountedUnder(m.Root); err != nil || len(left) > 0 {
		t.Errorf("left mounted under %s: %v %v", m.Root, left, err)
	}
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

func kernelRelease() (string, error) {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String(), nil
}

// cgroupDirs are this process's cgroup in every hierarchy: where a
// machine started from here creates its own (its cgroup namespace's root).
func cgroupDirs(t *testing.T) map[string]bool {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{} // controllers (or "" for v2) -> path
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 {
			paths[f[1]] = f[2]
		}
	}
	dirs := map[string]bool{}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "cgroup" && f[2] != "cgroup2") {
			continue
		}
		key := ""
		if f[2] == "cgroup" {
			for _, opt := range strings.Split(f[3], ",") {
				for controllers := range paths {
					if controllers != "" && slices.Contains(strings.Split(controllers, ","), opt) {
						key = controllers
					}
				}
			}
			if key == "" {
				continue
			}
		}
		if p, ok := paths[key]; ok {
			dirs[filepath.Join(f[1], p)] = true
		}
	}
	return dirs
}

func subdirs(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// removeCgroup removes a cgroup and its children, deepest first; it fails
// on one that still holds a process.
func removeCgroup(dir string) error {
	for _, sub := range subdirs(dir) {
		if err := removeCgroup(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil && len(bytes.TrimSpace(procs)) > 0 {
		return fmt.Errorf("%s still holds processes %s", dir, strings.Join(strings.Fields(string(procs)), " "))
	}
	var err error
	for range 50 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove %s: %w", dir, err)
}

func links(t *testing.T) []string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range ifaces {
		out = append(out, i.Name)
	}
	return out
}

// iptablesDump is cmd's (iptables-save's) rules without comments and
// counters, "" when it cannot run.
func iptablesDump(cmd string) string {
	out, err := exec.Command(cmd).Output()
	if err != nil {
		return ""
	}
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if f := strings.Fields(line); strings.HasPrefix(line, ":") && len(f) > 1 {
			line = f[0] + " " + f[1] // the chain and its policy, not its counters
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// restoreIptables puts back the tables of dump old (cmd is iptables-save
// or ip6tables-save): tables the machine added are flushed and their
// chains deleted, tables it changed are restored.
func restoreIptables(cmd, old string) error {
	now := iptablesDump(cmd)
	if maps.Equal(tables(now), tables(old)) {
		return nil
	}
	tool := strings.TrimSuffix(cmd, "-save")
	oldTables := tables(old)
	for name := range tables(now) {
		if _, ok := oldTables[name]; !ok {
			for _, args := range [][]string{{"-t", name, "-F"}, {"-t", name, "-X"}} {
				if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
					return fmt.Errorf("%s %v: %v: %s", tool, args, err, out)
				}
			}
		}
	}
	nowTables := tables(now)
	for name, rules := range oldTables {
		if nowTables[name] == rules {
			continue
		}
		restore := exec.Command(tool+"-restore", "-T", name)
		restore.Stdin = strings.NewReader(rules + "\nCOMMIT\n")
		if out, err := restore.CombinedOutput(); err != nil {
			return fmt.Errorf("%s-restore -T %s: %v: %s", tool, name, err, out)
		}
	}
	if left := iptablesDump(cmd); !maps.Equal(tables(left), oldTables) {
		return fmt.Errorf("%s after the cleanup:\n%s\nbefore the machine:\n%s", cmd, left, old)
	}
	return nil
}

// tables splits a dump into its tables ("*name" up to COMMIT, excluded),
// leaving out empty ones: only built-in chains accepting everything, which
// is what no table at all does (iptables-nft cannot delete a table, only
// empty it).
func tables(dump string) map[string]string {
	out := map[string]string{}
	var name string
	var lines []string
	empty := true
	for _, line := range strings.Split(dump, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			name, lines, empty = line[1:], []string{line}, true
		case line == "COMMIT":
			if !empty {
				out[name] = strings.Join(lines, "\n")
			}
		default:
			lines = append(lines, line)
			if f := strings.Fields(line); len(f) != 2 || !strings.HasPrefix(f[0], ":") || f[1] != "ACCEPT" {
				empty = false
			}
		}
	}
	return out
}
