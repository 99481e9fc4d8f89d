package templates

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// proxyEnv is the content the proxy step writes to proxy.env.
func proxyEnv(t *testing.T, step string) string {
	t.Helper()
	const start, end = "/etc/node-manager/proxy.env 0600 proxy <<'ENV'\n", "\nENV\n"
	i := strings.Index(step, start)
	if i < 0 {
		t.Fatalf("the proxy step does not write proxy.env with mode 0600:\n%s", step)
	}
	j := strings.Index(step[i:], end)
	if j < 0 {
		t.Fatal("proxy.env's here-document does not end")
	}
	return step[i+len(start) : i+j+1]
}

// TestProxyEnvIsQuoted: proxy.env holds every value single-quoted, and
// sourcing it (as bb-with-proxy does) gives exactly the values, running
// nothing.
func TestProxyEnvIsQuoted(t *testing.T) {
	tree := builtinTree(t)
	settings, err := ParseClusterConfiguration([]byte("proxy: {httpProxy: 'http://u:p%26w%40x@proxy:3128', httpsProxy: 'https://[fd00::1]:3129/', noProxy: ['*.corp', '[fd00::]/8']}"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := NewContext(workerGroupForFuzz(), settings, []string{"10.0.0.1:6443"}, testCA)
	if err != nil {
		t.Fatal(err)
	}
	env := proxyEnv(t, mustRender(t, tree, ctx).Steps["020_proxy_and_ca.sh"])
	for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); !ok || k == "" || len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' {
			t.Errorf("proxy.env line %q is not KEY='value'", line)
		}
	}
	file := filepath.Join(t.TempDir(), "proxy.env")
	if err := os.WriteFile(file, []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", "--noprofile", "--norc", "-c",
		`set -Eeuo pipefail; set -a; . "$1"; set +a; printf '%s\n' "$HTTP_PROXY" "$http_proxy" "$HTTPS_PROXY" "$https_proxy" "$NO_PROXY"`, "bash", file).CombinedOutput()
	if err != nil {
		t.Fatalf("sourcing proxy.env: %v\n%s", err, out)
	}
	want := "http://u:p%26w%40x@proxy:3128\nhttp://u:p%26w%40x@proxy:3128\nhttps://[fd00::1]:3129/\nhttps://[fd00::1]:3129/\n" +
		"127.0.0.1,169.254.169.254,cluster.local,10.111.0.0/16,10.222.0.0/16,*.corp,[fd00::]/8\n"
	if string(out) != want {
		t.Errorf("sourcing proxy.env gave\n%s\nwant\n%s", out, want)
	}

	// Without a proxy, the file says so and sets nothing.
	if env := proxyEnv(t, mustRender(t, tree, workerContext(t, nil)).Steps["020_proxy_and_ca.sh"]); strings.Contains(env, "=") {
		t.Errorf("proxy.env without a proxy:\n%s", env)
	}

	// A value the server would refuse, put into the context directly,
	// fails the render instead of reaching a node.
	for _, bad := range []string{"http://p:3128/'; reboot; '", "http://p:3128/\\", "http://p:3128/\nreboot"} {
		ctx := workerContext(t, nil)
		ctx.Proxy = &Proxy{HTTPProxy: bad, NoProxy: []string{"127.0.0.1"}}
		if b, failures := tree.Render(&ctx, nil); b != nil || len(failures) == 0 || (!strings.Contains(failures[0].Error(), "HTTP_PROXY") && !strings.Contains(failures[0].Error(), "proxy.httpProxy")) {
			t.Errorf("%q: the render should fail naming HTTP_PROXY or proxy.httpProxy, got %v", bad, failures)
		}
	}
}

func kubeletConfigOf(t *testing.T, k *deckhousev1.KubeletSpec) string {
	t.Helper()
	b := mustRender(t, builtinTree(t), workerContext(t, func(ng *deckhousev1.NodeGroup) { ng.Spec.Kubelet = k }))
	return b.Steps["060_kubelet.sh"]
}

func TestKubeletCPUManagerPolicy(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	tm := &deckhousev1.TopologyManagerSpec{Enabled: true, Scope: "Container", Policy: "SingleNumaNode"}
	static := func(cpu *resource.Quantity) *deckhousev1.ResourceReservationSpec {
		return &deckhousev1.ResourceReservationSpec{Mode: deckhousev1.ResourceReservationStatic,
			Static: &deckhousev1.StaticResourceReservation{CPU: cpu, Memory: q("1Gi")}}
	}
	cases := []struct {
		name    string
		kubelet *deckhousev1.KubeletSpec
		want    string
	}{
		{"defaults", nil, "none"},
		{"topology manager, Auto reservation", &deckhousev1.KubeletSpec{TopologyManager: tm}, "static"},
		{"topology manager, Static 500m", &deckhousev1.KubeletSpec{TopologyManager: tm, ResourceReservation: static(q("500m"))}, "static"},
		{"topology manager, Static 2", &deckhousev1.KubeletSpec{TopologyManager: tm, ResourceReservation: static(q("2"))}, "static"},
		{"topology manager, Static 0", &deckhousev1.KubeletSpec{TopologyManager: tm, ResourceReservation: static(q("0"))}, "none"},
		{"topology manager, Static 0m", &deckhousev1.KubeletSpec{TopologyManager: tm, ResourceReservation: static(q("0m"))}, "none"},
		{"topology manager, Static without cpu", &deckhousev1.KubeletSpec{TopologyManager: tm, ResourceReservation: static(nil)}, "none"},
		{"topology manager, Off", &deckhousev1.KubeletSpec{TopologyManager: tm,
			ResourceReservation: &deckhousev1.ResourceReservationSpec{Mode: deckhousev1.ResourceReservationOff}}, "none"},
		{"Static 500m without topology manager", &deckhousev1.KubeletSpec{ResourceReservation: static(q("500m"))}, "none"},
	}
	for _, tc := range cases {
		step := kubeletConfigOf(t, tc.kubelet)
		if n := strings.Count(step, "cpuManagerPolicy: "); n != 1 || !strings.Contains(step, "\ncpuManagerPolicy: "+tc.want+"\n") {
			t.Errorf("%s: want cpuManagerPolicy: %s once:\n%s", tc.name, tc.want, step)
		}
		wantKey := `cpu_manager="static $reserved_cpu"`
		if tc.want == "none" {
			wantKey = "cpu_manager=none"
		}
		if !strings.Contains(step, "\n"+wantKey+"\n") {
			t.Errorf("%s: the applied CPU manager state should be %s", tc.name, wantKey)
		}
		if !strings.Contains(step, "\nserverTLSBootstrap: false\n") || strings.Contains(step, "serverTLSBootstrap: true") {
			t.Errorf("%s: serverTLSBootstrap must be false", tc.name)
		}
		if !strings.Contains(step, `echo "resolvConf: $resolv_conf"`) {
			t.Errorf("%s: resolvConf is not written", tc.name)
		}
	}
}

// TestCgroupV1HostSettingsRenderOnlyWhenSet: kubelet.failCgroupV1 and
// cri.containerd(V2).restrictOOMScoreAdj reach the kubelet's and
// containerd's configuration as the group sets them, and a group without
// them renders exactly what it rendered before they existed (each
// Kubernetes version keeps its own failCgroupV1 default).
func TestCgroupV1HostSettingsRenderOnlyWhenSet(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kubelet *deckhousev1.KubeletSpec
		want    string
	}{
		{"unset", nil, ""},
		{"unset with other kubelet settings", &deckhousev1.KubeletSpec{MaxPods: ptrTo[int32](200)}, ""},
		{"false", &deckhousev1.KubeletSpec{FailCgroupV1: ptrTo(false)}, "\nfailCgroupV1: false\n"},
		{"true", &deckhousev1.KubeletSpec{FailCgroupV1: ptrTo(true)}, "\nfailCgroupV1: true\n"},
	} {
		step := kubeletConfigOf(t, tc.kubelet)
		if got := strings.Count(step, "failCgroupV1:"); tc.want == "" && got != 0 || tc.want != "" && (got != 1 || !strings.Contains(step, tc.want)) {
			t.Errorf("%s: want %q once (or not at all when unset):\n%s", tc.name, tc.want, excerpt(t, step, "cpuManagerPolicy", "YAML"))
		}
	}
	tree := builtinTree(t)
	for _, tc := range []struct {
		name    string
		cri     *deckhousev1.CRISpec
		want    bool
		section string
	}{
		{"containerd 1.7, unset", nil, false, ""},
		{"containerd 1.7", &deckhousev1.CRISpec{Containerd: &deckhousev1.ContainerdSpec{RestrictOOMScoreAdj: true}}, true, "[plugins.'io.containerd.grpc.v1.cri']"},
		{"containerd 2, unset", &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerdV2}, false, ""},
		{"containerd 2", &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerdV2, ContainerdV2: &deckhousev1.ContainerdSpec{RestrictOOMScoreAdj: true}}, true, "[plugins.'io.containerd.cri.v1.runtime']"},
	} {
		step := mustRender(t, tree, workerContext(t, func(ng *deckhousev1.NodeGroup) { ng.Spec.CRI = tc.cri })).Steps["040_containerd.sh"]
		got := strings.Count(step, "restrict_oom_score_adj")
		if !tc.want && got != 0 || tc.want && got != 1 {
			t.Errorf("%s: restrict_oom_score_adj %d times, want it %v", tc.name, got, tc.want)
		}
		if tc.want && !strings.Contains(step, tc.section+"\n") {
			t.Errorf("%s: restrict_oom_score_adj should be in %s:\n%s", tc.name, tc.section, step)
		}
	}
}

// excerpt cuts a rendered step from the line starting with from up to the
// line starting with to (excluded; "" for the end).
func excerpt(t *testing.T, step, from, to string) string {
	t.Helper()
	i := strings.Index(step, "\n"+from)
	if i < 0 {
		t.Fatalf("%q is not in the step", from)
	}
	rest := step[i+1:]
	if to == "" {
		return rest
	}
	j := strings.Index(rest, "\n"+to)
	if j < 0 {
		t.Fatalf("%q does not follow %q in the step", to, from)
	}
	return rest[:j+1]
}

// TestKubeletCPUManagerCheckpointReset runs the kubelet step's CPU manager
// part against a kubelet root directory in a temporary directory, with
// systemctl and the disruption gate stubbed: a changed policy or static
// reservation stops the kubelet and removes its checkpoints after the
// gate; an unchanged one, or no checkpoint at all, touches nothing.
func TestKubeletCPUManagerCheckpointReset(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed")
	}
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	tm := &deckhousev1.TopologyManagerSpec{Enabled: true, Scope: "Container", Policy: "SingleNumaNode"}
	withCPU := func(cpu string) *deckhousev1.KubeletSpec {
		return &deckhousev1.KubeletSpec{TopologyManager: tm, ResourceReservation: &deckhousev1.ResourceReservationSpec{
			Mode: deckhousev1.ResourceReservationStatic, Static: &deckhousev1.StaticResourceReservation{CPU: q(cpu)}}}
	}
	cases := []struct {
		name       string
		kubelet    *deckhousev1.KubeletSpec
		applied    string // the recorded state, "" for none
		checkpoint string // the policy in cpu_manager_state, "" for no checkpoint
		reset      bool
	}{
		{"none to static", withCPU("500m"), "none", "none", true},
		{"static to none", nil, "static 500m", "static", true},
		{"a new static reservation", withCPU("1500m"), "static 500m", "static", true},
		{"unchanged static", withCPU("500m"), "static 500m", "static", false},
		{"unchanged none", nil, "none", "none", false},
		{"changed, but the kubelet never ran", withCPU("500m"), "none", "", false},
		{"first run", withCPU("500m"), "", "", false},
		{"unrecorded, the checkpoint agrees", nil, "", "none", false},
		{"unrecorded, the checkpoint agrees (static)", withCPU("500m"), "", "static", false},
		{"unrecorded, the checkpoint says static", nil, "", "static", true},
		{"unrecorded, the checkpoint says none", withCPU("500m"), "", "none", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A directory of the characters rootDir may have (t.TempDir
			// carries the subtest's name, commas included).
			dir, err := os.MkdirTemp("", "cpu-manager")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			root := filepath.Join(dir, "kubelet")
			k := tc.kubelet
			if k == nil {
				k = &deckhousev1.KubeletSpec{}
			}
			k.RootDir = root
			step := kubeletConfigOf(t, k)
			part := excerpt(t, step, "# Resource reservation", "# The kubelet's resolv.conf")
			part = strings.ReplaceAll(part, "/var/lib/node-manager/", dir+"/")
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			applied := filepath.Join(dir, "kubelet-cpu-manager")
			if tc.applied != "" {
				if err := os.WriteFile(applied, []byte(tc.applied+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.checkpoint != "" {
				for _, name := range []string{"cpu_manager_state", "memory_manager_state"} {
					if err := os.WriteFile(filepath.Join(root, name), []byte(`{"policyName":"`+tc.checkpoint+`","checksum":1}`), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			script := filepath.Join(dir, "step.sh")
			stubs := `set -Eeuo pipefail
calls=()
bb-log() { echo "log: $*" >&2; }
bb-disruption-gate() { calls+=(gate); }
systemctl() { calls+=("systemctl $*"); }
bb-remove() { if [[ -e "$1" ]]; then rm -f "$1"; calls+=("remove ${1##*/} $2"); fi; }
`
			if err := os.WriteFile(script, []byte(stubs+part+`echo "calls: ${calls[*]}"`+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out := runBash(t, script)
			_, cpStat := os.Stat(filepath.Join(root, "cpu_manager_state"))
			reset := strings.Contains(out, "calls: gate systemctl is-active --quiet kubelet.service systemctl stop kubelet.service remove cpu_manager_state kubelet remove memory_manager_state kubelet")
			if reset != tc.reset || (tc.reset && cpStat == nil) {
				t.Errorf("reset %v, want %v; output:\n%s", reset, tc.reset, out)
			}
			if !tc.reset && strings.Contains(out, "gate") {
				t.Errorf("no disruption expected:\n%s", out)
			}
		})
	}
}

// TestKubeletResolvConf: the kubelet reads systemd-resolved's upstream
// resolv.conf only where /etc/resolv.conf is resolved's stub.
func TestKubeletResolvConf(t *testing.T) {
	step := kubeletConfigOf(t, nil)
	part := excerpt(t, step, "resolv_conf=/etc/resolv.conf", "# The node's IP on a machine")
	for _, tc := range []struct {
		etc      string // /etc/resolv.conf, "" for none
		resolved bool   // /run/systemd/resolve/resolv.conf exists
		want     string
	}{
		{"nameserver 127.0.0.53\noptions edns0 trust-ad\n", true, "/run/systemd/resolve/resolv.conf"},
		{"# stub\nnameserver 127.0.0.54\n", true, "/run/systemd/resolve/resolv.conf"},
		{"nameserver 127.0.0.53\n", false, "/etc/resolv.conf"},
		{"nameserver 10.0.0.2\n", true, "/etc/resolv.conf"},
		{"nameserver 127.0.0.530\n", true, "/etc/resolv.conf"},
		{"", true, "/etc/resolv.conf"},
	} {
		dir := t.TempDir()
		etc, run := filepath.Join(dir, "etc-resolv.conf"), filepath.Join(dir, "run-resolv.conf")
		if tc.etc != "" {
			if err := os.WriteFile(etc, []byte(tc.etc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if tc.resolved {
			if err := os.WriteFile(run, []byte("nameserver 10.0.0.2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		script := strings.NewReplacer("[[ -f /run/systemd/resolve/resolv.conf ]]", "[[ -f "+run+" ]]",
			"' /etc/resolv.conf", "' "+etc).Replace(part)
		file := filepath.Join(dir, "step.sh")
		if err := os.WriteFile(file, []byte("set -Eeuo pipefail\n"+script+`echo "$resolv_conf"`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := runBash(t, file); got != tc.want {
			t.Errorf("/etc/resolv.conf %q, resolved's file %v: resolvConf %s, want %s", tc.etc, tc.resolved, got, tc.want)
		}
	}
}

// TestPreflightDiskCheckOnFirstRunOnly: too little room on /var fails the
// first run only; later runs warn and go on.
func TestPreflightDiskCheckOnFirstRunOnly(t *testing.T) {
	step := mustRender(t, builtinTree(t), workerContext(t, nil)).Steps["000_preflight.sh"]
	part := excerpt(t, step, "need_mib=", "")
	for _, tc := range []struct {
		firstRun bool
		freeKiB  int
		fails    bool
	}{
		{true, 1024 * 1024, true},
		{false, 1024 * 1024, false},
		{true, 3 * 1024 * 1024, false},
		{false, 3 * 1024 * 1024, false},
	} {
		dir := t.TempDir()
		if tc.firstRun {
			if err := os.WriteFile(filepath.Join(dir, "first_run"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		file := filepath.Join(dir, "step.sh")
		stubs := "set -Eeuo pipefail\nBASHIBLE_DIR=" + dir + "\nbb-log() { echo \"$*\"; }\n" +
			"df() { printf '  Avail\\n %s\\n' " + strconv.Itoa(tc.freeKiB) + "; }\n"
		if err := os.WriteFile(file, []byte(stubs+part), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("bash", file).CombinedOutput()
		if (err != nil) != tc.fails {
			t.Errorf("first run %v, %d KiB free: error %v, want failure %v\n%s", tc.firstRun, tc.freeKiB, err, tc.fails, out)
		}
		if tc.fails && !strings.Contains(string(out), "not enough disk space to join: /var has 1024 MiB free") {
			t.Errorf("unclear message: %s", out)
		}
		if !tc.firstRun && tc.freeKiB < 2*1024*1024 && !strings.Contains(string(out), "warning") {
			t.Errorf("a later run should warn: %s", out)
		}
	}
}

// TestKernelStep: IPv6 forwarding only where the kernel has IPv6, and a
// swap file made atomically.
func TestKernelStep(t *testing.T) {
	plain := mustRender(t, builtinTree(t), workerContext(t, nil)).Steps["015_kernel.sh"]
	if strings.Contains(plain, "\nnet.ipv6.conf.all.forwarding = 1\n") ||
		!strings.Contains(plain, "if [[ -d /proc/sys/net/ipv6 ]]; then\n    echo 'net.ipv6.conf.all.forwarding = 1'") {
		t.Errorf("IPv6 forwarding must be written only where /proc/sys/net/ipv6 exists:\n%s", plain)
	}
	swap := mustRender(t, builtinTree(t), workerContext(t, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MemorySwap: &deckhousev1.MemorySwapSpec{SwapBehavior: "LimitedSwap",
			LimitedSwap: &deckhousev1.LimitedSwapSpec{Size: "4G"}}}
	})).Steps["015_kernel.sh"]
	order := []string{"fallocate -l '4G' /var/swapfile.new", "mkswap /var/swapfile.new", "mv -f /var/swapfile.new /var/swapfile", "swapon /var/swapfile"}
	last := 0
	for _, s := range order {
		i := strings.Index(swap, s)
		if i < last {
			t.Fatalf("the swap file is not made in the order %v:\n%s", order, swap)
		}
		last = i
	}
	if !strings.Contains(swap, "!= SWAPSPACE2") {
		t.Error("a /var/swapfile without the swap signature must be made again")
	}
	// The /etc/fstab part works without an /etc/fstab.
	part := excerpt(t, swap, "if ! grep -qs '^/var/swapfile ' /etc/fstab; then", "")
	dir := t.TempDir()
	fstab := filepath.Join(dir, "fstab")
	part = strings.ReplaceAll(part, "/etc/fstab", fstab)
	file := filepath.Join(dir, "step.sh")
	stubs := "set -Eeuo pipefail\nbb-write-if-changed() { cat > \"$1\"; }\n"
	if err := os.WriteFile(file, []byte(stubs+part), 0o600); err != nil {
		t.Fatal(err)
	}
	runBash(t, file)
	runBash(t, file)
	if got := readFileT(t, fstab); got != "/var/swapfile none swap sw 0 0\n" {
		t.Errorf("fstab made from nothing, twice: %q", got)
	}
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runBash runs a script with bash and the given environment, returning its
// combined output.
func runBash(t *testing.T, script string, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash %s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}
