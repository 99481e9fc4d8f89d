package templates

import (
	"slices"
	"strings"
	"testing"
)

func TestParseClusterConfiguration(t *testing.T) {
	def, err := ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	if def.Cluster.ClusterDomain != "cluster.local" || def.Cluster.ClusterDNSAddress != "10.222.0.10" ||
		def.Cluster.KubernetesVersion != DefaultKubernetesVersion || def.Cluster.DefaultCRI != "Containerd" || len(def.Proxy.NoProxy) != 0 {
		t.Errorf("defaults: %+v", def)
	}
	got, err := ParseClusterConfiguration([]byte("kind: ClusterConfiguration\nserviceSubnetCIDR: 10.96.0.0/12\nkubernetesVersion: Automatic\nproxy:\n  httpsProxy: http://p:3128\n  noProxy: [.corp]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Cluster.ClusterDNSAddress != "10.96.0.10" || got.Cluster.KubernetesVersion != DefaultKubernetesVersion {
		t.Errorf("parsed: %+v", got.Cluster)
	}
	if want := []string{"127.0.0.1", "169.254.169.254", "cluster.local", "10.111.0.0/16", "10.96.0.0/12", ".corp"}; !slices.Equal(got.Proxy.NoProxy, want) {
		t.Errorf("noProxy = %v, want %v", got.Proxy.NoProxy, want)
	}
	for _, bad := range []string{
		"kind: Something",
		"serviceSubnetCIDR: nonsense",
		"podSubnetNodeCIDRPrefix: \"40\"",
		"clusterDomain: [",
		"proxy: {httpProxy: \"http://p:3128; rm -rf /\"}",
		"proxy: {httpProxy: http://p, noProxy: [\"a b\"]}",
		"packageSource: {url: ftp://mirror}",
		"extraCACertificates: [\"not a certificate\"]",
		"registry: {mirrors: [{host: docker.io}]}",
		"registry: {mirrors: [{host: \"Docker.io/x\", endpoints: [https://m]}]}",
		"registry: {mirrors: [{host: docker.io, endpoints: [https://m]}, {host: docker.io, endpoints: [https://n]}]}",
		"registry: {mirrors: [{host: docker.io, endpoints: [https://m], auth: nonsense}]}",
		"registry: {mirrors: [{host: docker.io, endpoints: [https://m], auth: dTpw, username: u}]}",
		"registry: {mirrors: [{host: docker.io, endpoints: [https://m], ca: nope}]}",
	} {
		if _, err := ParseClusterConfiguration([]byte(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestRegistryMirrors(t *testing.T) {
	got, err := ParseClusterConfiguration([]byte(`
registry:
  mirrors:
    - {host: registry.k8s.io, endpoints: ["https://m:5000"], auth: dTpw}
    - {host: docker.io, endpoints: ["https://m:5000", "http://c"], username: puller, password: s3cret}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []RegistryMirror{
		{Host: "docker.io", Endpoints: []string{"https://m:5000", "http://c"}, Auth: "cHVsbGVyOnMzY3JldA=="},
		{Host: "registry.k8s.io", Endpoints: []string{"https://m:5000"}, Auth: "dTpw"},
	}
	if len(got.Registry.Mirrors) != 2 || got.Registry.Mirrors[0].Auth != want[0].Auth || got.Registry.Mirrors[1].Host != want[1].Host ||
		!slices.Equal(got.Registry.Mirrors[0].Endpoints, want[0].Endpoints) {
		t.Errorf("mirrors %+v, want %+v", got.Registry.Mirrors, want)
	}
}

func TestProxyURLValidation(t *testing.T) {
	for _, good := range []string{
		"http://proxy:3128",
		"https://proxy.corp.example.com",
		"http://proxy.corp:3128/",
		"http://10.0.0.1:8080",
		"http://[fd00::1]:3128",
		"http://user@proxy:3128",
		"http://user:s3cret@proxy:3128",
		"http://u:p%26w%40x@proxy:3128", // & and @ in the password, percent-encoded
		"http://dom%5Cuser:pa~ss_wo.rd-+=,@proxy:3128",
		"http://proxy:3128/some/path_1",
	} {
		if err := checkProxyURL(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
		cc := "proxy: {httpProxy: '" + good + "', httpsProxy: '" + good + "'}"
		if _, err := ParseClusterConfiguration([]byte(cc)); err != nil {
			t.Errorf("%s: %v", cc, err)
		}
	}
	for _, bad := range []string{
		"http://u:p&w@proxy:3128",
		"http://p:3128/;reboot",
		"http://p:3128/$(reboot)",
		"http://p:3128/`reboot`",
		"http://p:3128|reboot",
		"http://p:3128/>x",
		"http://u:p'w@p:3128",
		"http://u:p\"w@p:3128",
		"http://u:p\\w@p:3128",
		"http://p:3128/a b",
		"http://p:3128/\nreboot",
		"http://p:3128/#x",
		"http://p:3128/?a=b",
		"http://u:p!w@p:3128",
		"http://u:p*w@p:3128",
		"http://p:3128/%zz",
		"http://p:99999",
		"http://p:0",
		"ftp://p:21",
		"socks5://p:1080",
		"proxy:3128",
		"http://",
		"http://-p:3128",
		"http://p:3128:1",
		"http://u:p@w@p:3128",
	} {
		if err := checkProxyURL(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
		for _, field := range []string{"httpProxy", "httpsProxy"} {
			cc := "proxy:\n  " + field + ": " + yamlQuote(bad) + "\n"
			_, err := ParseClusterConfiguration([]byte(cc))
			if err == nil || !strings.Contains(err.Error(), "proxy."+field+":") {
				t.Errorf("%s: want an error naming proxy.%s, got %v", cc, field, err)
			}
		}
	}
}

// yamlQuote writes s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
