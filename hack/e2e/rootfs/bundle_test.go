package rootfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
	"github.com/node-manager/node-manager/templates"
)

const bootstrapToken = "e2e0ab.0123456789abcdef"

// clusterCA is a real certificate (the renderer parses the cluster CA and
// encodes it again): the one the template golden tests use.
var clusterCA = func() string {
	root, err := controlplane.RepoRoot()
	if err != nil {
		panic(err)
	}
	pem, err := os.ReadFile(filepath.Join(root, "templates", "testdata", "ca.crt"))
	if err != nil {
		panic(err)
	}
	return string(pem)
}()

// node is a Debian root set up to run bundles the way bashible.sh runs them.
type node struct {
	t      *testing.T
	root   string
	tree   *templates.Tree
	repo   string
	mirror *framework.PackageSource
	cc     string
	// static is the StaticClusterConfiguration, empty for none.
	static string
	// endpoints are the API servers' host:port.
	endpoints []string
}

// render renders the Static worker group with the e2e cluster settings.
func (n *node) render(mutate func(*deckhousev1.NodeGroup)) *templates.Bundle {
	t := n.t
	t.Helper()
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	if mutate != nil {
		mutate(ng)
	}
	settings, err := templates.ParseClusterConfiguration([]byte(n.cc))
	if err != nil {
		t.Fatal(err)
	}
	if settings.Static, err = templates.ParseStaticClusterConfiguration([]byte(n.static)); err != nil {
		t.Fatal(err)
	}
	ctx, err := templates.NewContext(ng, settings, n.endpoints, clusterCA)
	if err != nil {
		t.Fatal(err)
	}
	b, failures := n.tree.Render(&ctx, nil)
	if failures != nil {
		t.Fatalf("render: %v", failures)
	}
	return b
}

// install writes the library and the steps as bashible.sh would.
func (n *node) install(b *templates.Bundle) {
	t := n.t
	t.Helper()
	const start, end = "<<'BASHIBLE_LIB'\n", "\nBASHIBLE_LIB\n"
	i, j := strings.Index(b.Bashible, start), strings.Index(b.Bashible, end)
	if i < 0 || j < i {
		t.Fatal("bashible.sh does not carry the library where expected")
	}
	dir := filepath.Join(n.root, "var/lib/bashible")
	writeFile(t, filepath.Join(dir, "lib.sh"), b.Bashible[i+len(start):j+1], 0o600)
	if err := os.RemoveAll(filepath.Join(dir, "bundle_steps")); err != nil {
		t.Fatal(err)
	}
	for name, content := range b.Steps {
		writeFile(t, filepath.Join(dir, "bundle_steps", name), content, 0o600)
	}
}

// runSteps runs every step in order the way bashible.sh's run_step does:
// a fresh bash that sources the library, then the step, from
// /var/lib/bashible. It returns the output and the stubs' calls.
func (n *node) runSteps(checksum string) (string, []string, error) {
	t := n.t
	t.Helper()
	stubLog := filepath.Join(n.root, "var/log/stub-calls.log")
	_ = os.Remove(stubLog)
	const script = `umask 022
for step in /var/lib/bashible/bundle_steps/*; do
  name=${step##*/}
  echo "=== $name"
  BASHIBLE_STEP=$name bash --noprofile --norc -c 'set -Eeuo pipefail; source "$1"; cd "$2"; source "$3"' \
    bashible /var/lib/bashible/lib.sh /var/lib/bashible "$step" || { echo "=== $name failed"; exit 1; }
done`
	start := time.Now()
	out, err := debianroot.Run(t, n.root, []string{"BASHIBLE_CHECKSUM=" + checksum}, script)
	t.Logf("the bundle ran in %s", time.Since(start).Round(time.Millisecond))
	var calls []string
	if data, rerr := os.ReadFile(stubLog); rerr == nil {
		calls = strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	return out, calls, err
}

// applied records a successful run as bashible.sh does.
func (n *node) applied(checksum string) {
	writeFile(n.t, filepath.Join(n.root, "var/lib/bashible/configuration_checksum"), checksum+"\n", 0o600)
	_ = os.Remove(filepath.Join(n.root, "var/lib/bashible/first_run"))
}

// changes are the calls that change something: everything but queries.
func changes(calls []string) []string {
	var out []string
	for _, c := range calls {
		if strings.HasPrefix(c, "systemctl is-enabled") || strings.HasPrefix(c, "systemctl is-active") || c == "swapon --show=NAME --noheadings" {
			continue
		}
		out = append(out, c)
	}
	return out
}

// stubAddresses is `ip -j addr show up` of the test machine: a NIC on the
// default route and one on the internal network (with IPv6 besides).
const stubAddresses = `[
 {"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host"}]},
 {"ifindex":2,"ifname":"eth0","addr_info":[{"family":"inet","local":"203.0.113.7","prefixlen":24,"scope":"global"}]},
 {"ifindex":3,"ifname":"eth1","addr_info":[{"family":"inet6","local":"fe80::2","prefixlen":64,"scope":"link"},
   {"family":"inet","local":"192.168.10.5","prefixlen":24,"scope":"global"},
   {"family":"inet6","local":"fd00:10::5","prefixlen":64,"scope":"global"}]}
]`

// worker is a fresh Debian root, with the stubs and the files a joining
// machine has, and a package source serving the binaries built from the
// pinned modules, the Static worker group rendered against both.
type worker struct {
	*node
	// packages are the bundle's Debian base packages.
	packages []string
}

func newWorker(t *testing.T) *worker {
	t.Helper()
	debianroot.RequireRoot(t)
	repo, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{packages: templates.BuiltinVersions().BasePackages["debian"]}
	root := debianroot.Fresh(t, w.packages)
	debianroot.InstallStubs(t, root)
	m := framework.StartPackageSource(t)
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	w.node = &node{t: t, root: root, tree: tree, repo: repo, mirror: m, cc: framework.ClusterConfiguration(t, m.URL, m.Versions, ""),
		endpoints: []string{"10.0.0.10:6443", "10.0.0.11:6443"},
		static:    "apiVersion: deckhouse.io/v1\nkind: StaticClusterConfiguration\ninternalNetworkCIDRs: [10.0.0.0/8, 192.168.10.0/24]\n"}
	writeFile(t, filepath.Join(root, "etc/stub-ip-addr.json"), stubAddresses, 0o644)
	bdir := filepath.Join(root, "var/lib/bashible")
	writeFile(t, filepath.Join(bdir, "first_run"), "", 0o600)
	writeFile(t, filepath.Join(bdir, "bootstrap-token"), bootstrapToken+"\n", 0o600)
	writeFile(t, filepath.Join(bdir, "ca.crt"), clusterCA, 0o600)
	return w
}

// TestDebianWorkerBundle runs the Static worker's bundle on Debian
// bookworm, on a machine with two networks whose internal one the cluster's
// StaticClusterConfiguration names: the first run installs and configures
// everything, from the package mirror, verified, with the journal's limits,
// bashible's log rotation and the kubelet's node IP; the second changes
// nothing; a new maxPods
// rewrites one file and restarts only the kubelet; a new API endpoint
// rewrites one file and reloads only the API proxy; a newer containerd
// waits for disruption approval; the cleanup script takes it all away.
func TestDebianWorkerBundle(t *testing.T) {
	w := newWorker(t)
	n, m, root, packages := w.node, w.mirror, w.root, w.packages
	bin, k8sVersion, ctrdVersion := m.Bin, m.KubernetesVersion, m.ContainerdVersion
	kubeletSum, kubectlSum, override := m.KubeletSum, m.KubectlSum, m.Versions
	builtin := templates.BuiltinVersions()
	bdir := filepath.Join(root, "var/lib/bashible")
	bundle := n.render(nil)
	n.install(bundle)

	// The first run: the machine is configured.
	out, calls, err := n.runSteps(bundle.Checksum)
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, tail(out, 60))
	}
	t.Logf("first run, last lines:\n%s", tail(out, 15))
	// The base packages were installed from the .deb files the cached root
	// holds, with no package list refresh (the run is offline).
	if !strings.Contains(out, "030_base_packages.sh: installing conntrack ethtool iproute2 iptables kmod socat runc haproxy") ||
		strings.Contains(out, "refreshing the package lists") {
		t.Errorf("the base packages step should have installed the missing packages at once:\n%s", out)
	}

	status, err := debianroot.Run(t, root, nil, "dpkg-query -W -f='${Package} ${Status}\\n' "+strings.Join(packages, " "))
	if err != nil {
		t.Fatalf("dpkg-query: %v\n%s", err, status)
	}
	for _, line := range strings.Split(strings.TrimSpace(status), "\n") {
		if !strings.HasSuffix(line, " install ok installed") {
			t.Errorf("base package not installed: %s", line)
		}
	}
	for path, want := range map[string]string{
		"usr/local/bin/kubelet":                 kubeletSum,
		"usr/local/bin/kubectl":                 kubectlSum,
		"usr/local/bin/containerd":              sha256File(t, filepath.Join(bin, "containerd")),
		"usr/local/bin/containerd-shim-runc-v2": sha256File(t, filepath.Join(bin, "containerd-shim-runc-v2")),
		"usr/local/bin/ctr":                     sha256File(t, filepath.Join(bin, "ctr")),
	} {
		if got := sha256File(t, filepath.Join(root, path)); got != want {
			t.Errorf("/%s has sha256 %s, want %s", path, got, want)
		}
	}
	if got := m.TakeRequests(); len(got) != 3 {
		t.Errorf("the first run should download kubelet, kubectl and containerd once each, got %v", got)
	}
	for path, expect := range map[string][]string{
		"etc/containerd/config.toml":                                {"version = 3", "max_concurrent_downloads = 3", `sandbox = "` + builtin.SandboxImage + `"`, "SystemdCgroup = true"},
		"etc/kubernetes/kubelet/config.yaml":                        {"maxPods: 120", "clusterDNS:\n  - \"10.222.0.10\"", "cgroupDriver: systemd", "systemReserved:\n  cpu: "},
		"etc/kubernetes/bootstrap-kubelet.conf":                     {"server: https://127.0.0.1:6445", "token: " + bootstrapToken},
		"etc/kubernetes/pki/ca.crt":                                 {clusterCA},
		"etc/systemd/system/kubelet.service.d/10-node-manager.conf": {"--node-labels=node.deckhouse.io/group=worker,node.deckhouse.io/type=Static \\\n  --node-ip=192.168.10.5 \\\n  --register-with-taints=node.deckhouse.io/uninitialized=:NoSchedule\n"},
		"var/lib/bashible/discovered-node-ip":                       {"192.168.10.5\n"},
		"etc/systemd/journald.conf.d/node-manager.conf":             {"[Journal]\nMaxFileSec=24h\nMaxRetentionSec=14day\n"},
		"etc/logrotate.d/node-manager":                              {"/var/lib/bashible/step.log /var/lib/bashible/step.failed.log {", "copytruncate"},
		"etc/node-manager/kubernetes-api-proxy.cfg":                 {"bind 127.0.0.1:6445", "server apiserver-0 10.0.0.10:6443 check", "server apiserver-1 10.0.0.11:6443 check"},
		"etc/sysctl.d/90-node-manager.conf":                         {"net.ipv4.ip_forward = 1", "net.bridge.bridge-nf-call-iptables = 1"},
		"etc/modules-load.d/node-manager.conf":                      {"overlay\nbr_netfilter\nnf_conntrack\n"},
		"etc/hosts":                                                 {"127.0.1.1 e2e-worker # node-manager"},
		"var/lib/bashible/cleanup_static_node.sh":                   {"--yes-i-am-sane-and-i-understand-what-i-am-doing"},
		"etc/systemd/system/bashible.timer":                         {"OnUnitInactiveSec=1min"},
	} {
		content := framework.ReadFile(t, filepath.Join(root, path))
		for _, w := range expect {
			if !strings.Contains(content, w) {
				t.Errorf("/%s lacks %q:\n%s", path, w, content)
			}
		}
	}
	for path, mode := range map[string]os.FileMode{"etc/kubernetes/bootstrap-kubelet.conf": 0o600, "var/lib/bashible/cleanup_static_node.sh": 0o700, "usr/local/bin/kubelet": 0o755} {
		if info, err := os.Stat(filepath.Join(root, path)); err != nil || info.Mode().Perm() != mode {
			t.Errorf("/%s: mode %v, want %v (%v)", path, info.Mode().Perm(), mode, err)
		}
	}
	wantCalls := []string{
		"modprobe overlay", "modprobe br_netfilter", "modprobe nf_conntrack",
		"sysctl --quiet --load /etc/sysctl.d/90-node-manager.conf",
		"systemctl restart bashible.timer", "systemctl restart systemd-journald.service", "systemctl restart containerd.service",
		"systemctl restart kubernetes-api-proxy.service", "systemctl restart kubelet.service",
	}
	for _, c := range wantCalls {
		if !slices.Contains(calls, c) {
			t.Errorf("the first run should have called %q; calls: %v", c, calls)
		}
	}

	// The binaries are real: they run in the root, and containerd takes
	// the generated configuration; so does logrotate.
	check, err := debianroot.Run(t, root, nil, `kubelet --version
logrotate --debug /etc/logrotate.d/node-manager
containerd --version
containerd --config /etc/containerd/config.toml config dump > /tmp/dump
grep -F "max_concurrent_downloads = 3" /tmp/dump
grep -F "SystemdCgroup = true" /tmp/dump
grep -F "config_path = '/etc/containerd/certs.d'" /tmp/dump
haproxy -c -f /etc/node-manager/kubernetes-api-proxy.cfg`)
	if err != nil {
		t.Fatalf("the installed binaries: %v\n%s", err, check)
	}
	if !strings.Contains(check, "Kubernetes v"+k8sVersion) || !strings.Contains(check, ctrdVersion) {
		t.Errorf("versions:\n%s", check)
	}

	// The second run changes nothing: no file written, no restart, no download.
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
	if strings.Contains(out, ": wrote ") || strings.Contains(out, "installing") {
		t.Errorf("the second run reports changes:\n%s", out)
	}
	if got := m.TakeRequests(); len(got) > 0 {
		t.Errorf("the second run downloaded %v", got)
	}

	// One group setting changes one file and restarts only the kubelet.
	more := n.render(func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](200)}
	})
	n.install(more)
	// Update approval is bashible.sh's, before the steps (the bashible suite
	// proves it); the steps run here directly.
	before = snapshot(t, root)
	out, calls, err = n.runSteps(more.Checksum)
	if err != nil {
		t.Fatalf("run with maxPods 200: %v\n%s", err, tail(out, 60))
	}
	if changed := changedFiles(before, snapshot(t, root)); !slices.Equal(changed, []string{"etc/kubernetes/kubelet/config.yaml"}) {
		t.Errorf("a new maxPods changed files %v, want only the kubelet configuration", changed)
	}
	if c := changes(calls); !slices.Equal(c, []string{"systemctl daemon-reload", "systemctl restart kubelet.service"}) {
		t.Errorf("a new maxPods made the calls %v, want only the kubelet restarted", c)
	}
	n.applied(more.Checksum)

	// New API endpoints reconfigure the local API proxy: its configuration
	// is rewritten and HAProxy reloaded, nothing else.
	n.endpoints = []string{"10.0.0.10:6443", "10.0.0.11:6443", "10.0.0.12:6443"}
	moved := n.render(func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](200)}
	})
	n.install(moved)
	before = snapshot(t, root)
	out, calls, err = n.runSteps(moved.Checksum)
	if err != nil {
		t.Fatalf("run with a new endpoint: %v\n%s", err, tail(out, 60))
	}
	if changed := changedFiles(before, snapshot(t, root)); !slices.Equal(changed, []string{"etc/node-manager/kubernetes-api-proxy.cfg"}) {
		t.Errorf("a new endpoint changed files %v, want only the API proxy's configuration", changed)
	}
	if !strings.Contains(framework.ReadFile(t, filepath.Join(root, "etc/node-manager/kubernetes-api-proxy.cfg")), "server apiserver-2 10.0.0.12:6443 check") {
		t.Error("the API proxy should balance over the new endpoint too")
	}
	if c := changes(calls); !slices.Equal(c, []string{"systemctl daemon-reload", "systemctl reload-or-restart kubernetes-api-proxy.service"}) {
		t.Errorf("a new endpoint made the calls %v, want only the API proxy reloaded", c)
	}
	n.applied(moved.Checksum)

	// A new containerd version is a disruption: the step asks for approval
	// (bb-disruption-gate) before it replaces anything. No API runs here, so
	// asking fails, and the run stops with containerd untouched.
	newer := ctrdVersion + "0"
	m.AddTarball(t, "containerd/v"+newer+"/containerd-"+newer+"-linux-"+m.Arch+".tar.gz", m.ContainerdFiles())
	override.Containerd["ContainerdV2"] = templates.ContainerdRelease{Version: newer, SHA256: m.Sums(m.ContainerdSum)}
	n.cc = framework.ClusterConfiguration(t, m.URL, override, "")
	upgrade := n.render(func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](200)}
	})
	n.install(upgrade)
	before = snapshot(t, root)
	out, calls, err = n.runSteps(upgrade.Checksum)
	if err == nil || !strings.Contains(out, "containerd "+ctrdVersion+" is to be replaced by "+newer) || !strings.Contains(out, "=== 040_containerd.sh failed") {
		t.Errorf("a containerd upgrade should stop at the disruption gate (err %v):\n%s", err, tail(out, 20))
	}
	// Asking the API writes the bootstrap token's header file (bb-kube-api);
	// nothing else may change.
	if changed := changedFiles(before, snapshot(t, root)); !slices.Equal(changed, []string{"var/lib/bashible/bootstrap-token-header"}) {
		t.Errorf("a containerd upgrade without approval changed files: %v", changed)
	}
	if c := changes(calls); len(c) > 0 {
		t.Errorf("a containerd upgrade without approval made the calls %v", c)
	}
	n.install(moved)

	// logrotate caps a step log that grew: it is copied aside, compressed,
	// and emptied in place (bashible appends to it while the step runs).
	writeFile(t, filepath.Join(bdir, "step.log"), strings.Repeat("a step that talks a lot\n", 500000), 0o644)
	if out, err := debianroot.Run(t, root, nil, "logrotate --state /tmp/logrotate.state /etc/logrotate.d/node-manager && gzip -t /var/lib/bashible/step.log.1.gz"); err != nil {
		t.Errorf("logrotate: %v\n%s", err, out)
	}
	if info, err := os.Stat(filepath.Join(bdir, "step.log")); err != nil || info.Size() != 0 {
		t.Errorf("step.log should be emptied by the rotation (%v)", err)
	}

	// The cleanup script refuses without its flag, and with it takes away
	// what the bundle installed and reboots.
	if out, err := debianroot.Run(t, root, nil, "/var/lib/bashible/cleanup_static_node.sh"); err == nil || !strings.Contains(out, "--yes-i-am-sane") {
		t.Errorf("cleanup_static_node.sh without its flag should refuse (err %v):\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/bin/kubelet")); err != nil {
		t.Fatal("the refused cleanup removed something")
	}
	_ = os.Remove(filepath.Join(root, "var/log/stub-calls.log"))
	if out, err := debianroot.Run(t, root, nil, "/var/lib/bashible/cleanup_static_node.sh --yes-i-am-sane-and-i-understand-what-i-am-doing"); err != nil {
		t.Fatalf("cleanup_static_node.sh: %v\n%s", err, out)
	}
	for _, gone := range []string{"usr/local/bin/kubelet", "usr/local/bin/containerd", "etc/kubernetes", "etc/containerd", "var/lib/bashible",
		"etc/systemd/system/kubelet.service", "etc/sysctl.d/90-node-manager.conf", "etc/node-manager",
		"etc/systemd/journald.conf.d/node-manager.conf", "etc/logrotate.d/node-manager"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
			t.Errorf("/%s is left after the cleanup", gone)
		}
	}
	calls = strings.Split(strings.TrimSpace(framework.ReadFile(t, filepath.Join(root, "var/log/stub-calls.log"))), "\n")
	for _, c := range []string{"systemctl disable --now kubelet.service", "systemctl disable --now containerd.service", "systemctl reboot"} {
		if !slices.Contains(calls, c) {
			t.Errorf("the cleanup should have called %q; calls: %v", c, calls)
		}
	}
}
