package templates

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Defaults used when the cluster does not say.
const (
	DefaultKubernetesVersion = "1.36"
	DefaultClusterDomain     = "cluster.local"
	DefaultPodSubnetCIDR     = "10.111.0.0/16"
	DefaultServiceSubnetCIDR = "10.222.0.0/16"
	DefaultPodSubnetPrefix   = 24
	DefaultCRI               = "Containerd"
	DefaultCRISocketPath     = "/run/containerd/containerd.sock"
	BootstrapTokenPath       = "/var/lib/bashible/bootstrap-token"
	// Upstream package sources, used unless packageSource.url says otherwise.
	DefaultKubernetesPackageSource = "https://dl.k8s.io/release"
	DefaultContainerdPackageSource = "https://github.com/containerd/containerd/releases/download"
)

// clusterConfiguration is the part of Deckhouse's ClusterConfiguration
// (kube-system/d8-cluster-configuration, key cluster-configuration.yaml)
// that nodes depend on.
type clusterConfiguration struct {
	Kind                    string `json:"kind"`
	ClusterDomain           string `json:"clusterDomain"`
	PodSubnetCIDR           string `json:"podSubnetCIDR"`
	ServiceSubnetCIDR       string `json:"serviceSubnetCIDR"`
	PodSubnetNodeCIDRPrefix string `json:"podSubnetNodeCIDRPrefix"`
	DefaultCRI              string `json:"defaultCRI"`
	KubernetesVersion       string `json:"kubernetesVersion"`
	Proxy                   struct {
		HTTPProxy  string   `json:"httpProxy"`
		HTTPSProxy string   `json:"httpsProxy"`
		NoProxy    []string `json:"noProxy"`
	} `json:"proxy"`
	// The fields below are node-manager's own (Deckhouse keeps them
	// elsewhere); they are documented in templates/README.md.
	PackageSource struct {
		URL      string      `json:"url"`
		Versions *VersionMap `json:"versions"`
	} `json:"packageSource"`
	Registry struct {
		Mirrors []struct {
			Host      string   `json:"host"`
			Endpoints []string `json:"endpoints"`
			CA        string   `json:"ca"`
			Auth      string   `json:"auth"`
			Username  string   `json:"username"`
			Password  string   `json:"password"`
		} `json:"mirrors"`
	} `json:"registry"`
	ExtraCACertificates []string `json:"extraCACertificates"`
}

// ClusterSettings are the cluster-wide parts of every group's context.
type ClusterSettings struct {
	Cluster       Cluster
	Proxy         Proxy
	PackageSource PackageSource
	Registry      Registry
	// Versions is the built-in version map with the cluster's entries over it.
	Versions VersionMap
	// Static is the StaticClusterConfiguration's part (see
	// ParseStaticClusterConfiguration), nil when the cluster has none.
	Static *StaticNodes
}

// staticClusterConfiguration is the part of Deckhouse's
// StaticClusterConfiguration (kube-system/d8-static-cluster-configuration,
// key static-cluster-configuration.yaml) that nodes depend on.
type staticClusterConfiguration struct {
	Kind                 string   `json:"kind"`
	InternalNetworkCIDRs []string `json:"internalNetworkCIDRs"`
}

// ParseStaticClusterConfiguration reads StaticClusterConfiguration YAML:
// nil for empty input (the cluster has none), else its internal network
// CIDRs, each an IPv4 or IPv6 address with a prefix length (192.168.0.0/24,
// fd00:10::/64), in the order given and in canonical form. Host bits are
// kept, as Deckhouse keeps them (nodes compare only the network bits). The
// CIDRs reach a root shell, so anything else is refused, naming the entry;
// other keys of Deckhouse's schema are ignored.
func ParseStaticClusterConfiguration(data []byte) (*StaticNodes, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var sc staticClusterConfiguration
	if err := yaml.Unmarshal(data, &sc); err != nil {
		return nil, fmt.Errorf("static-cluster-configuration.yaml: %w", err)
	}
	if sc.Kind != "" && sc.Kind != "StaticClusterConfiguration" {
		return nil, fmt.Errorf("static-cluster-configuration.yaml: kind is %q, want StaticClusterConfiguration", sc.Kind)
	}
	out := &StaticNodes{InternalNetworkCIDRs: []string{}}
	for i, c := range sc.InternalNetworkCIDRs {
		prefix, err := netip.ParsePrefix(c)
		if err != nil || prefix.Addr().Zone() != "" || prefix.Addr().Is4In6() {
			return nil, fmt.Errorf("static-cluster-configuration.yaml: internalNetworkCIDRs[%d]: %q is not a CIDR such as 192.168.0.0/24 or fd00:10::/64", i, c)
		}
		out.InternalNetworkCIDRs = append(out.InternalNetworkCIDRs, prefix.String())
	}
	return out, nil
}

// ParseClusterConfiguration reads ClusterConfiguration YAML; empty input
// gives every default. Errors name the offending field.
func ParseClusterConfiguration(data []byte) (ClusterSettings, error) {
	var cc clusterConfiguration
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: %w", err)
	}
	if cc.Kind != "" && cc.Kind != "ClusterConfiguration" {
		return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: kind is %q, want ClusterConfiguration", cc.Kind)
	}
	if cc.ClusterDomain != "" {
		errs := validation.IsDNS1123Subdomain(cc.ClusterDomain)
		for _, label := range strings.Split(cc.ClusterDomain, ".") {
			if len(errs) == 0 {
				errs = validation.IsDNS1123Label(label)
			}
		}
		if len(errs) > 0 {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: clusterDomain: %q is not a DNS name (RFC 1123): lowercase labels of letters, digits and '-', "+
				"each starting and ending with a letter or digit and at most 63 characters long, separated by dots", cc.ClusterDomain)
		}
	}
	if cc.DefaultCRI != "" && !slices.Contains(CRITypes, cc.DefaultCRI) {
		return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: defaultCRI: %q is not one of %s", cc.DefaultCRI, strings.Join(CRITypes, ", "))
	}
	c := Cluster{
		ClusterDomain:           or(cc.ClusterDomain, DefaultClusterDomain),
		PodSubnetCIDR:           or(cc.PodSubnetCIDR, DefaultPodSubnetCIDR),
		ServiceSubnetCIDR:       or(cc.ServiceSubnetCIDR, DefaultServiceSubnetCIDR),
		PodSubnetNodeCIDRPrefix: DefaultPodSubnetPrefix,
		DefaultCRI:              or(cc.DefaultCRI, DefaultCRI),
		KubernetesVersion:       cc.KubernetesVersion,
	}
	if c.KubernetesVersion == "" || c.KubernetesVersion == "Automatic" {
		c.KubernetesVersion = DefaultKubernetesVersion
	}
	if cc.PodSubnetNodeCIDRPrefix != "" {
		p, err := strconv.Atoi(cc.PodSubnetNodeCIDRPrefix)
		if err != nil || p < 8 || p > 30 {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: podSubnetNodeCIDRPrefix %q is not a prefix length from 8 to 30", cc.PodSubnetNodeCIDRPrefix)
		}
		c.PodSubnetNodeCIDRPrefix = p
	}
	for field, cidr := range map[string]string{"podSubnetCIDR": c.PodSubnetCIDR, "serviceSubnetCIDR": c.ServiceSubnetCIDR} {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: %s: %w", field, err)
		}
	}
	dns, err := tenthAddress(c.ServiceSubnetCIDR)
	if err != nil {
		return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: serviceSubnetCIDR: %w", err)
	}
	c.ClusterDNSAddress = dns

	p := Proxy{HTTPProxy: cc.Proxy.HTTPProxy, HTTPSProxy: cc.Proxy.HTTPSProxy, NoProxy: []string{}}
	for _, f := range []struct{ field, url string }{{"proxy.httpProxy", p.HTTPProxy}, {"proxy.httpsProxy", p.HTTPSProxy}} {
		if err := checkProxyURL(f.url); err != nil {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: %s: %w", f.field, err)
		}
	}
	for _, n := range cc.Proxy.NoProxy {
		if !noProxyRE.MatchString(n) {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: proxy.noProxy: %q is not a host, domain, address or CIDR", n)
		}
	}
	if p.HTTPProxy != "" || p.HTTPSProxy != "" {
		p.NoProxy = append([]string{"127.0.0.1", "169.254.169.254", c.ClusterDomain, c.PodSubnetCIDR, c.ServiceSubnetCIDR}, cc.Proxy.NoProxy...)
	}

	c.ExtraCACertificates = []string{}
	for i, pemText := range cc.ExtraCACertificates {
		canonical, err := CanonicalCertificates(pemText)
		if err != nil {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: extraCACertificates[%d]: %w", i, err)
		}
		c.ExtraCACertificates = append(c.ExtraCACertificates, canonical)
	}

	source := PackageSource{Kubernetes: DefaultKubernetesPackageSource, Containerd: DefaultContainerdPackageSource}
	if u := strings.TrimRight(cc.PackageSource.URL, "/"); u != "" {
		if !urlRE.MatchString(u) {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: packageSource.url: %q is not an http:// or https:// URL", cc.PackageSource.URL)
		}
		source = PackageSource{Kubernetes: u + "/kubernetes", Containerd: u + "/containerd"}
	}
	versions := BuiltinVersions()
	if o := cc.PackageSource.Versions; o != nil {
		if err := o.Validate(); err != nil {
			return ClusterSettings{}, fmt.Errorf("cluster-configuration.yaml: packageSource.versions: %w", err)
		}
		versions = versions.Merge(*o)
	}

	registry, err := parseRegistry(cc)
	if err != nil {
		return ClusterSettings{}, err
	}
	return ClusterSettings{Cluster: c, Proxy: p, PackageSource: source, Registry: registry, Versions: versions}, nil
}

var (
	// urlRE: an http(s) URL that is safe to write into shell and TOML
	// unquoted-or-quoted alike: no whitespace, quotes, backslashes or $.
	urlRE = regexp.MustCompile(`^https?://[^\s"'\\$` + "`" + `]+$`)
	// proxyURLRE: a proxy URL of characters that mean nothing to a shell or
	// to systemd: http or https, optional user[:password]@ (unreserved
	// characters, "+", ",", "=" and percent-encoding: %26 for "&", %40 for
	// "@" and so on), a host name, IPv4 or [IPv6] address, an optional port
	// and an optional path of the same characters. Nodes write it into
	// /etc/node-manager/proxy.env, which bash sources as root.
	proxyURLRE = regexp.MustCompile(`^https?://` +
		`(` + proxyURLChars + `+(:` + proxyURLChars + `*)?@)?` +
		`([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])` +
		`(?P<port>:[0-9]{1,5})?` +
		`(/(` + proxyURLChars + `|/)*)?$`)
	// noProxyRE: a host, .domain, address or CIDR.
	noProxyRE = regexp.MustCompile(`^[-a-zA-Z0-9.*:/\[\]]+$`)
	// registryHostRE: a registry host as images name it, with an optional port.
	registryHostRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?$`)
)

// proxyURLChars: one character of a proxy URL's user, password or path.
const proxyURLChars = `([-A-Za-z0-9._~+,=]|%[0-9A-Fa-f]{2})`

// checkProxyURL accepts an empty URL (no proxy) or one proxyURLRE matches
// with a port from 1 to 65535.
func checkProxyURL(u string) error {
	if u == "" {
		return nil
	}
	m := proxyURLRE.FindStringSubmatch(u)
	if m == nil {
		return fmt.Errorf("%q is not a proxy URL nodes accept: http:// or https://, then [user[:password]@]host[:port][/path], "+
			"of letters, digits and - . _ ~ + , = (other characters percent-encoded, such as %%26 for & and %%40 for @ in a password)", withoutUserInfo(u))
	}
	if port := strings.TrimPrefix(m[proxyURLRE.SubexpIndex("port")], ":"); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: the port %s is not from 1 to 65535", withoutUserInfo(u), port)
		}
	}
	return nil
}

// withoutUserInfo is a URL for an error message: whatever stands between
// "://" and the last "@" of its authority (a user and password) is replaced
// by "xxxxx".
func withoutUserInfo(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		scheme, rest = "", u
	}
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		authority = "xxxxx" + authority[i:]
	} else if i := strings.LastIndex(rest, "@"); i >= 0 {
		// An "@" after a "/" may still be a password's: keep nothing before it.
		authority, path = "xxxxx"+rest[i:], ""
	}
	if ok {
		return scheme + "://" + authority + path
	}
	return authority + path
}

// parseRegistry checks the registry mirrors and gives each its credentials
// as base64 of user:password (from auth or from username and password),
// sorted by host so the rendered order does not depend on the input's.
func parseRegistry(cc clusterConfiguration) (Registry, error) {
	r := Registry{Mirrors: []RegistryMirror{}}
	seen := map[string]bool{}
	for i, m := range cc.Registry.Mirrors {
		field := fmt.Sprintf("cluster-configuration.yaml: registry.mirrors[%d]", i)
		if !registryHostRE.MatchString(m.Host) {
			return Registry{}, fmt.Errorf("%s.host: %q is not a registry host such as docker.io or registry.corp:5000", field, m.Host)
		}
		if seen[m.Host] {
			return Registry{}, fmt.Errorf("%s.host: %s is listed twice", field, m.Host)
		}
		seen[m.Host] = true
		if len(m.Endpoints) == 0 {
			return Registry{}, fmt.Errorf("%s.endpoints: at least one endpoint is needed", field)
		}
		for _, e := range m.Endpoints {
			if !urlRE.MatchString(e) {
				return Registry{}, fmt.Errorf("%s.endpoints: %q is not an http:// or https:// URL", field, e)
			}
		}
		mirror := RegistryMirror{Host: m.Host, Endpoints: slices.Clone(m.Endpoints), Auth: m.Auth}
		if m.CA != "" {
			canonical, err := CanonicalCertificates(m.CA)
			if err != nil {
				return Registry{}, fmt.Errorf("%s.ca: %w", field, err)
			}
			mirror.CA = canonical
		}
		switch {
		case m.Auth != "" && (m.Username != "" || m.Password != ""):
			return Registry{}, fmt.Errorf("%s: give either auth or username and password, not both", field)
		case m.Username != "":
			mirror.Auth = base64.StdEncoding.EncodeToString([]byte(m.Username + ":" + m.Password))
		case m.Auth != "":
			// Go's decoder skips line breaks: the value nodes get is
			// encoded again from the decoded bytes.
			decoded, err := base64.StdEncoding.DecodeString(m.Auth)
			if err != nil || !strings.Contains(string(decoded), ":") {
				return Registry{}, fmt.Errorf("%s.auth: not base64 of user:password", field)
			}
			mirror.Auth = base64.StdEncoding.EncodeToString(decoded)
		}
		r.Mirrors = append(r.Mirrors, mirror)
	}
	slices.SortFunc(r.Mirrors, func(a, b RegistryMirror) int { return strings.Compare(a.Host, b.Host) })
	return r, nil
}

// tenthAddress is the tenth address of the service subnet, which the
// cluster DNS Service takes.
func tenthAddress(cidr string) (string, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", err
	}
	addr := prefix.Masked().Addr()
	for range 10 {
		addr = addr.Next()
	}
	if !prefix.Contains(addr) {
		return "", fmt.Errorf("%s is too small to hold the cluster DNS address", cidr)
	}
	return addr.String(), nil
}
