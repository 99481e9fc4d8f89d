package templates

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// staticContext is a group's context in a cluster whose
// StaticClusterConfiguration is static (empty for none).
func staticContext(t *testing.T, nodeType deckhousev1.NodeType, static string) Context {
	t.Helper()
	settings, err := ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	if settings.Static, err = ParseStaticClusterConfiguration([]byte(static)); err != nil {
		t.Fatal(err)
	}
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: deckhousev1.NodeGroupSpec{NodeType: nodeType}}
	ctx, err := NewContext(ng, settings, []string{"10.0.0.1:6443"}, testCA)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

func TestParseStaticClusterConfiguration(t *testing.T) {
	for _, empty := range []string{"", "  \n"} {
		if s, err := ParseStaticClusterConfiguration([]byte(empty)); s != nil || err != nil {
			t.Errorf("%q: got %v, %v; want nil (no StaticClusterConfiguration)", empty, s, err)
		}
	}
	s, err := ParseStaticClusterConfiguration([]byte("apiVersion: deckhouse.io/v1\nkind: StaticClusterConfiguration\n" +
		"internalNetworkCIDRs: [192.168.0.0/24, 10.1.2.3/16, 'FD00:10::/64']\nother: kept out\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.InternalNetworkCIDRs, " "); got != "192.168.0.0/24 10.1.2.3/16 fd00:10::/64" {
		t.Errorf("internalNetworkCIDRs %q: want them in order, canonical, host bits kept as Deckhouse keeps them", got)
	}
	if s, err := ParseStaticClusterConfiguration([]byte("kind: StaticClusterConfiguration\n")); err != nil || s == nil || s.InternalNetworkCIDRs == nil || len(s.InternalNetworkCIDRs) != 0 {
		t.Errorf("no CIDRs: got %v, %v; want an empty list", s, err)
	}
	for _, bad := range []string{
		"internalNetworkCIDRs: [192.168.0.0]",
		"internalNetworkCIDRs: [192.168.0.0/33]",
		"internalNetworkCIDRs: ['10.0.0.0/8; reboot']",
		"internalNetworkCIDRs: ['$(reboot)/8']",
		"internalNetworkCIDRs: ['fe80::/10%eth0']",
		"internalNetworkCIDRs: [' 10.0.0.0/8']",
		"internalNetworkCIDRs: 10.0.0.0/8",
		"kind: ClusterConfiguration\ninternalNetworkCIDRs: [10.0.0.0/8]",
	} {
		if _, err := ParseStaticClusterConfiguration([]byte(bad)); err == nil {
			t.Errorf("%q was accepted", bad)
		} else if strings.Contains(bad, "/8]") && !strings.Contains(err.Error(), "kind") && !strings.Contains(err.Error(), "internalNetworkCIDRs[0]") {
			t.Errorf("%q: the error should name the entry: %v", bad, err)
		}
	}
}

// TestStaticReachesStaticGroupsOnly: .nodeGroup.static is Deckhouse's, set
// only for a Static group in a cluster with a StaticClusterConfiguration and
// null otherwise.
func TestStaticReachesStaticGroupsOnly(t *testing.T) {
	const static = "internalNetworkCIDRs: [192.168.0.0/24]"
	has := func(ctx Context) bool {
		values, err := ctx.Values()
		if err != nil {
			t.Fatal(err)
		}
		v, ok := values["nodeGroup"].(map[string]any)["static"]
		if !ok {
			t.Fatal("the context should always have the key .nodeGroup.static")
		}
		return v != nil
	}
	if ctx := staticContext(t, deckhousev1.NodeTypeStatic, static); !has(ctx) || ctx.NodeGroup.Static.InternalNetworkCIDRs[0] != "192.168.0.0/24" {
		t.Errorf("a Static group should see the CIDRs: %+v", ctx.NodeGroup.Static)
	}
	if has(staticContext(t, deckhousev1.NodeTypeStatic, "")) {
		t.Error("without a StaticClusterConfiguration, .nodeGroup.static should be null")
	}
	for _, other := range []deckhousev1.NodeType{deckhousev1.NodeTypeCloudStatic, deckhousev1.NodeTypeCloudPermanent} {
		if has(staticContext(t, other, static)) {
			t.Errorf("a %s group should not see .nodeGroup.static", other)
		}
	}
	// A CIDR that reaches the context some other way is refused by Check.
	ctx := staticContext(t, deckhousev1.NodeTypeStatic, static)
	ctx.NodeGroup.Static.InternalNetworkCIDRs = []string{"10.0.0.0/8 $(reboot)"}
	if err := ctx.Check(); err == nil || !strings.Contains(err.Error(), "nodeGroup.static.internalNetworkCIDRs[0]") {
		t.Errorf("Check should refuse a CIDR with shell in it, naming the field: %v", err)
	}
}

// ipAddrJSON is `ip -j addr show up` on a machine with several networks:
// the loopback, a first NIC on the default route with IPv4 and IPv6, a
// second on the internal network (a link-local and two global addresses,
// one of which failed duplicate address detection), a third with an
// address only in an IPv6 internal network.
const ipAddrJSON = `[
 {"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP"],"addr_info":[
   {"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host"},
   {"family":"inet6","local":"::1","prefixlen":128,"scope":"host"}]},
 {"ifindex":2,"ifname":"eth0","flags":["UP"],"addr_info":[
   {"family":"inet","local":"203.0.113.7","prefixlen":24,"scope":"global"},
   {"family":"inet6","local":"2001:db8:1::7","prefixlen":64,"scope":"global"},
   {"family":"inet6","local":"fe80::1","prefixlen":64,"scope":"link"}]},
 {"ifindex":3,"ifname":"eth1","flags":["UP"],"addr_info":[
   {"family":"inet6","local":"fe80::2","prefixlen":64,"scope":"link"},
   {"family":"inet","local":"192.168.10.9","prefixlen":24,"scope":"global","dadfailed":true},
   {"family":"inet","local":"192.168.10.5","prefixlen":24,"scope":"global"},
   {"family":"inet","local":"192.168.10.6","prefixlen":24,"scope":"global","secondary":true}]},
 {"ifindex":4,"ifname":"eth2","flags":["UP"],"addr_info":[
   {"family":"inet6","local":"fd00:10:0:0:0:0:0:2a","prefixlen":64,"scope":"global"}]}
]`

// TestKubeletNodeIP runs the kubelet step's node IP part with `ip` stubbed
// by the JSON above: the first address in the first CIDR that holds one
// becomes --node-ip and discovered-node-ip; with no match, or no CIDR
// configured, neither exists and the log says why.
func TestKubeletNodeIP(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed")
	}
	cases := []struct {
		name, static string
		want         string // "" for no --node-ip
		log          string
	}{
		{"the internal network", "internalNetworkCIDRs: [192.168.10.0/24]", "192.168.10.5", ""},
		{"host bits in the CIDR", "internalNetworkCIDRs: [192.168.10.77/24]", "192.168.10.5", ""},
		{"the first CIDR that matches wins", "internalNetworkCIDRs: [172.16.0.0/12, 192.168.0.0/16, 203.0.113.0/24]", "192.168.10.5", ""},
		{"a wider network", "internalNetworkCIDRs: [0.0.0.0/0]", "203.0.113.7", ""},
		{"a /32", "internalNetworkCIDRs: [192.168.10.6/32]", "192.168.10.6", ""},
		{"IPv6", "internalNetworkCIDRs: ['fd00:10::/64']", "fd00:10:0:0:0:0:0:2a", ""},
		{"IPv6 with an odd prefix", "internalNetworkCIDRs: ['2001:db8::/47']", "2001:db8:1::7", ""},
		{"IPv6 does not match IPv4", "internalNetworkCIDRs: ['::/0']", "2001:db8:1::7", ""},
		{"no link-local address", "internalNetworkCIDRs: ['fe80::/10']", "", "no address of this machine is in internalNetworkCIDRs (fe80::/10)"},
		{"no loopback address", "internalNetworkCIDRs: [127.0.0.0/8]", "", "no address of this machine is in internalNetworkCIDRs (127.0.0.0/8)"},
		{"no match", "internalNetworkCIDRs: [10.0.0.0/8, 'fd01::/16']", "", "no address of this machine is in internalNetworkCIDRs (10.0.0.0/8 fd01::/16)"},
		{"an empty list", "internalNetworkCIDRs: []", "", "no internal network is configured"},
		{"no StaticClusterConfiguration", "", "", "no internal network is configured"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			step := mustRender(t, builtinTree(t), staticContext(t, deckhousev1.NodeTypeStatic, tc.static)).Steps["060_kubelet.sh"]
			part := excerpt(t, step, "# The node's IP on a machine", "{")
			unit := excerpt(t, step, "{\n  cat <<'UNIT'\n# Managed by node-manager: the node registers", "bb-unit-converge kubelet.service")
			discovered := filepath.Join(dir, "discovered-node-ip")
			part = strings.ReplaceAll(part, "/var/lib/bashible/discovered-node-ip", discovered)
			if err := os.WriteFile(discovered, []byte("10.9.9.9\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "ip.json"), ipAddrJSON)
			stubs := `set -Eeuo pipefail
bb-log() { echo "log: $*" >&2; }
bb-write-if-changed() { cat > "$1"; }
bb-remove() { rm -f "$1"; }
ip() {
  if [[ "$*" == "-j addr show up" ]]; then cat ` + filepath.Join(dir, "ip.json") + `; else echo "eth0 203.0.113.7/24"; fi
}
`
			unitPart := strings.Replace(unit, "| bb-write-if-changed /etc/systemd/system/kubelet.service.d/10-node-manager.conf 0644 kubelet", "> "+filepath.Join(dir, "unit"), 1)
			writeFile(t, filepath.Join(dir, "step.sh"), stubs+part+unitPart)
			cmd := exec.Command("bash", filepath.Join(dir, "step.sh"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			unitText := readFileT(t, filepath.Join(dir, "unit"))
			got, statErr := os.ReadFile(discovered)
			if tc.want != "" {
				if string(got) != tc.want+"\n" {
					t.Errorf("discovered-node-ip %q (%v), want %s; output:\n%s", got, statErr, tc.want, out)
				}
				if !strings.Contains(unitText, "\n  --node-ip="+tc.want+" \\\n  --register-with-taints=") {
					t.Errorf("the kubelet's unit lacks --node-ip=%s:\n%s", tc.want, unitText)
				}
			} else {
				if statErr == nil {
					t.Errorf("discovered-node-ip should be gone, holds %q", got)
				}
				if strings.Contains(unitText, "--node-ip") {
					t.Errorf("no --node-ip expected:\n%s", unitText)
				}
				if !strings.Contains(string(out), tc.log) {
					t.Errorf("the log should say %q:\n%s", tc.log, out)
				}
			}
			// The unit's ExecStart stays one command: every line but the
			// last continues.
			lines := strings.Split(strings.TrimSpace(unitText[strings.Index(unitText, "ExecStart=/usr/local/bin/kubelet"):]), "\n")
			for i, l := range lines {
				if last := i == len(lines)-1; strings.HasSuffix(l, " \\") == last {
					t.Errorf("line %d of ExecStart %q: a continuation should end every line but the last:\n%s", i, l, unitText)
				}
			}
		})
	}
}

// TestIPBits: the address parsing under the node IP choice, IPv4 and IPv6
// in every spelling ip(8) prints, and what it must refuse.
func TestIPBits(t *testing.T) {
	step := mustRender(t, builtinTree(t), staticContext(t, deckhousev1.NodeTypeStatic, "internalNetworkCIDRs: [10.0.0.0/8]")).Steps["060_kubelet.sh"]
	fn := excerpt(t, step, "ip_bits() {", "# ip_in_cidr ")
	inCIDR := excerpt(t, step, "ip_in_cidr() {", "# find_node_ip CIDR")
	dir := t.TempDir()
	bits := func(hexGroups ...uint16) string {
		var b strings.Builder
		for _, g := range hexGroups {
			for i := 15; i >= 0; i-- {
				b.WriteByte('0' + byte(g>>i&1))
			}
		}
		return b.String()
	}
	for _, tc := range []struct {
		addr, want string // want "" for refused
	}{
		{"10.1.2.3", "00001010000000010000001000000011"},
		{"255.255.255.255", strings.Repeat("1", 32)},
		{"010.001.002.003", "00001010000000010000001000000011"},
		{"::", strings.Repeat("0", 128)},
		{"::1", bits(0, 0, 0, 0, 0, 0, 0, 1)},
		{"fd00:10::2a", bits(0xfd00, 0x10, 0, 0, 0, 0, 0, 0x2a)},
		{"FD00:10:0:0:0:0:0:2A", bits(0xfd00, 0x10, 0, 0, 0, 0, 0, 0x2a)},
		{"2001:db8::", bits(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0)},
		{"::ffff:192.0.2.1", bits(0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0201)},
		{"1:2:3:4:5:6:7::", bits(1, 2, 3, 4, 5, 6, 7, 0)},
		{"256.1.1.1", ""},
		{"1.2.3", ""},
		{"1:2:3:4:5:6:7:8:9", ""},
		{"1::2::3", ""},
		{"1:2:3:4:5:6:7:8::", ""},
		{"12345::", ""},
		{"fe80::1%eth0", ""},
		{"g::1", ""},
		{"", ""},
	} {
		script := "set -Eeuo pipefail\n" + fn + inCIDR + `ip_bits "$1" || echo refused` + "\n"
		writeFile(t, filepath.Join(dir, "bits.sh"), script)
		out, err := exec.Command("bash", filepath.Join(dir, "bits.sh"), tc.addr).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.addr, err, out)
		}
		got := strings.TrimSpace(string(out))
		if tc.want == "" && got != "refused" || tc.want != "" && got != tc.want {
			t.Errorf("ip_bits %q = %q, want %q", tc.addr, got, or(tc.want, "refused"))
		}
	}
	for _, tc := range []struct {
		addr, cidr string
		in         bool
	}{
		{"192.168.10.5", "192.168.10.0/24", true},
		{"192.168.11.5", "192.168.10.0/24", false},
		{"192.168.11.5", "192.168.10.0/23", true},
		{"10.0.0.1", "0.0.0.0/0", true},
		{"10.0.0.1", "10.0.0.1/32", true},
		{"10.0.0.2", "10.0.0.1/32", false},
		{"10.0.0.1", "10.0.0.0/33", false},
		{"10.0.0.1", "10.0.0.0", false},
		{"10.0.0.1", "::/0", false},
		{"fd00::1", "0.0.0.0/0", false},
		{"fd00:10::2a", "fd00:10::/64", true},
		{"fd00:11::2a", "fd00:10::/64", false},
		{"fd00:11::2a", "fd00:10::/31", true},
		{"fd00:11::2a", "fd00:10::/129", false},
	} {
		script := "set -Eeuo pipefail\n" + fn + inCIDR + `if ip_in_cidr "$1" "$2"; then echo in; else echo out; fi` + "\n"
		writeFile(t, filepath.Join(dir, "in.sh"), script)
		out, err := exec.Command("bash", filepath.Join(dir, "in.sh"), tc.addr, tc.cidr).CombinedOutput()
		if err != nil {
			t.Fatalf("%s in %s: %v\n%s", tc.addr, tc.cidr, err, out)
		}
		if got := strings.TrimSpace(string(out)) == "in"; got != tc.in {
			t.Errorf("ip_in_cidr %s %s = %v, want %v", tc.addr, tc.cidr, got, tc.in)
		}
	}
}
