package templates

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
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
}

// ClusterSettings are the cluster-wide parts of every group's context.
type ClusterSettings struct {
	Cluster Cluster
	Proxy   Proxy
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
	if p.HTTPProxy != "" || p.HTTPSProxy != "" {
		p.NoProxy = append([]string{"127.0.0.1", "169.254.169.254", c.ClusterDomain, c.PodSubnetCIDR, c.ServiceSubnetCIDR}, cc.Proxy.NoProxy...)
	}
	return ClusterSettings{Cluster: c, Proxy: p}, nil
}

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

// APIServerEndpoints returns host:port of every ready address on the
// "https" port of the given EndpointSlices, sorted and without duplicates.
func APIServerEndpoints(endpointSlices []*discoveryv1.EndpointSlice) []string {
	set := map[string]bool{}
	for _, s := range endpointSlices {
		for _, port := range s.Ports {
			if port.Port == nil || (port.Name != nil && *port.Name != "https") {
				continue
			}
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
					continue
				}
				for _, a := range ep.Addresses {
					set[net.JoinHostPort(a, strconv.Itoa(int(*port.Port)))] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// NewContext resolves a NodeGroup against the cluster's settings.
func NewContext(ng *deckhousev1.NodeGroup, settings ClusterSettings, endpoints []string, caPEM string) Context {
	cluster := settings.Cluster
	spec := ng.Spec
	version := or(spec.KubernetesVersion, cluster.KubernetesVersion)

	cri := CRI{
		Type:       cluster.DefaultCRI,
		Containerd: Containerd{MaxConcurrentDownloads: 3},
		NotManaged: NotManagedCRI{CRISocketPath: DefaultCRISocketPath},
	}
	if c := spec.CRI; c != nil {
		cri.Type = or(string(c.Type), cri.Type)
		for _, cd := range []*deckhousev1.ContainerdSpec{c.Containerd, c.ContainerdV2} {
			if cd != nil && cd.MaxConcurrentDownloads != nil {
				cri.Containerd.MaxConcurrentDownloads = *cd.MaxConcurrentDownloads
			}
		}
		if c.NotManaged != nil && c.NotManaged.CRISocketPath != "" {
			cri.NotManaged.CRISocketPath = c.NotManaged.CRISocketPath
		}
	}

	ngc := NodeGroup{
		Name:              ng.Name,
		NodeType:          string(spec.NodeType),
		KubernetesVersion: version,
		CRI:               cri,
		Kubelet:           resolveKubelet(spec.Kubelet, cluster.PodSubnetNodeCIDRPrefix),
		Disruptions:       Disruptions{ApprovalMode: string(deckhousev1.ApprovalAutomatic)},
		NodeTemplate:      NodeTemplate{Labels: map[string]string{}, Annotations: map[string]string{}, Taints: []Taint{}},
	}
	if d := spec.Disruptions; d != nil && d.ApprovalMode != "" {
		ngc.Disruptions.ApprovalMode = string(d.ApprovalMode)
	}
	if t := spec.NodeTemplate; t != nil {
		maps.Copy(ngc.NodeTemplate.Labels, t.Labels)
		maps.Copy(ngc.NodeTemplate.Annotations, t.Annotations)
		for _, taint := range t.Taints {
			ngc.NodeTemplate.Taints = append(ngc.NodeTemplate.Taints, Taint{Key: taint.Key, Value: taint.Value, Effect: string(taint.Effect)})
		}
	}
	if f := spec.Fencing; f != nil {
		ngc.Fencing = Fencing{Enabled: true, WatchdogTimeout: "60s"}
		if f.Watchdog != nil && f.Watchdog.Timeout != "" {
			ngc.Fencing.WatchdogTimeout = f.Watchdog.Timeout
		}
	}
	if ci := spec.CloudInstances; ci != nil {
		ngc.CloudInstances.ClassReference = ClassReference{Kind: ci.ClassReference.Kind, Name: ci.ClassReference.Name}
	}

	if endpoints == nil {
		endpoints = []string{}
	}
	return Context{
		RunType:           "Normal",
		NodeGroup:         ngc,
		KubernetesVersion: version,
		CRI:               cri.Type,
		Cluster:           cluster,
		Normal: Normal{
			BootstrapTokenPath: BootstrapTokenPath,
			ClusterDomain:      cluster.ClusterDomain,
			ClusterDNSAddress:  cluster.ClusterDNSAddress,
			APIServerEndpoints: endpoints,
			KubernetesCA:       caPEM,
		},
		Proxy: settings.Proxy,
	}
}

func resolveKubelet(k *deckhousev1.KubeletSpec, podPrefix int) Kubelet {
	out := Kubelet{
		MaxPods:              maxPodsForPrefix(podPrefix),
		RootDir:              "/var/lib/kubelet",
		ContainerLogMaxSize:  "50Mi",
		ContainerLogMaxFiles: 4,
		ResourceReservation:  ResourceReservation{Mode: string(deckhousev1.ResourceReservationAuto)},
		TopologyManager:      TopologyManager{Scope: "Container", Policy: "None"},
		MemorySwap:           MemorySwap{SwapBehavior: "NoSwap", Swappiness: 60},
	}
	if k == nil {
		return out
	}
	if k.MaxPods != nil {
		out.MaxPods = *k.MaxPods
	}
	out.RootDir = or(k.RootDir, out.RootDir)
	out.ContainerLogMaxSize = or(k.ContainerLogMaxSize, out.ContainerLogMaxSize)
	if k.ContainerLogMaxFiles != nil {
		out.ContainerLogMaxFiles = *k.ContainerLogMaxFiles
	}
	out.SeccompDefault = k.SeccompDefault
	if r := k.ResourceReservation; r != nil {
		out.ResourceReservation.Mode = or(string(r.Mode), out.ResourceReservation.Mode)
		if s := r.Static; s != nil {
			out.ResourceReservation.Static = StaticReservation{CPU: quantity(s.CPU), Memory: quantity(s.Memory), EphemeralStorage: quantity(s.EphemeralStorage)}
		}
	}
	if t := k.TopologyManager; t != nil {
		out.TopologyManager = TopologyManager{Enabled: t.Enabled, Scope: or(t.Scope, "Container"), Policy: or(t.Policy, "None")}
	}
	if s := k.MemorySwap; s != nil {
		out.MemorySwap.SwapBehavior = or(s.SwapBehavior, "NoSwap")
		if s.Swappiness != nil {
			out.MemorySwap.Swappiness = *s.Swappiness
		}
		if s.LimitedSwap != nil {
			out.MemorySwap.LimitedSwapSize = s.LimitedSwap.Size
		}
	}
	return out
}

func quantity(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	return q.String()
}

// maxPodsForPrefix follows Deckhouse: 120 for a /24 or longer per-node pod
// subnet, 250 for /23, 500 for /22, 1000 for /21 or shorter.
func maxPodsForPrefix(prefix int) int32 {
	switch {
	case prefix >= 24:
		return 120
	case prefix == 23:
		return 250
	case prefix == 22:
		return 500
	default:
		return 1000
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
