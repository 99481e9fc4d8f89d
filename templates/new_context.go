package templates

import (
	"fmt"
	"maps"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// APIServerEndpoints returns host:port of every address on the "https"
// port of the given EndpointSlices, sorted and without duplicates — ready
// or not. Endpoints are rendered into every group's bundle, so they are part
// of its configuration checksum: leaving out a not-ready one would make a
// readiness flap of one API server roll every node of every group through
// update approval. A not-ready server costs nothing: the local API proxy
// health-checks its backends, and bashible tries the endpoints in turn.
// Only a change of the set of API servers (one added, removed or
// re-addressed) changes the bundles.
func APIServerEndpoints(endpointSlices []*discoveryv1.EndpointSlice) []string {
	set := map[string]bool{}
	for _, s := range endpointSlices {
		for _, port := range s.Ports {
			if port.Port == nil || (port.Name != nil && *port.Name != "https") {
				continue
			}
			for _, ep := range s.Endpoints {
				for _, a := range ep.Addresses {
					set[net.JoinHostPort(a, strconv.Itoa(int(*port.Port)))] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// NewContext resolves a NodeGroup against the cluster's settings. It fails
// when the version map has no entry for the group's Kubernetes minor or
// managed container runtime.
func NewContext(ng *deckhousev1.NodeGroup, settings ClusterSettings, endpoints []string, caPEM string) (Context, error) {
	cluster := settings.Cluster
	spec := ng.Spec
	version := or(spec.KubernetesVersion, cluster.KubernetesVersion)

	cri := CRI{
		Type:       cluster.DefaultCRI,
		Containerd: Containerd{MaxConcurrentDownloads: 3},
		NotManaged: NotManagedCRI{CRISocketPath: DefaultCRISocketPath},
	}
	if c := spec.CRI; c != nil {
		// Docker (Deckhouse's deprecated runtime) is accepted and inert:
		// the group gets the cluster's runtime, as if cri.type were unset.
		if c.Type != deckhousev1.CRIDocker {
			cri.Type = or(string(c.Type), cri.Type)
		}
		for _, cd := range []*deckhousev1.ContainerdSpec{c.Containerd, c.ContainerdV2} {
			if cd != nil && cd.MaxConcurrentDownloads != nil {
				cri.Containerd.MaxConcurrentDownloads = *cd.MaxConcurrentDownloads
			}
			if cd != nil && cd.RestrictOOMScoreAdj {
				cri.Containerd.RestrictOOMScoreAdj = true
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
		fencing, err := resolveFencing(f)
		if err != nil {
			return Context{}, err
		}
		ngc.Fencing = fencing
	}
	if ci := spec.CloudInstances; ci != nil {
		ngc.CloudInstances = &CloudInstances{ClassReference: ClassReference{Kind: ci.ClassReference.Kind, Name: ci.ClassReference.Name}}
	}
	// As Deckhouse's get_crds hook does: the StaticClusterConfiguration
	// reaches Static groups only.
	if s := settings.Static; s != nil && spec.NodeType == deckhousev1.NodeTypeStatic {
		ngc.Static = &StaticNodes{InternalNetworkCIDRs: slices.Clone(s.InternalNetworkCIDRs)}
	}

	if endpoints == nil {
		endpoints = []string{}
	}
	if caPEM != "" {
		canonical, err := CanonicalCertificates(caPEM)
		if err != nil {
			return Context{}, fmt.Errorf("the cluster CA (kube-system/kube-root-ca.crt, key ca.crt): %w", err)
		}
		caPEM = canonical
	}
	vm := settings.Versions
	k8s, ok := vm.Kubernetes[version]
	if !ok {
		return Context{}, fmt.Errorf("kubernetesVersion %s is not in the version map (supported: %s)", version, strings.Join(vm.KubernetesMinors(), ", "))
	}
	versions := Versions{Kubernetes: k8s, SandboxImage: vm.SandboxImage, BasePackages: vm.BasePackages}
	if versions.BasePackages == nil {
		versions.BasePackages = map[string][]string{}
	}
	if cri.Type != "NotManaged" {
		if versions.Containerd, ok = vm.Containerd[cri.Type]; !ok {
			return Context{}, fmt.Errorf("cri.type %s has no containerd release in the version map", cri.Type)
		}
	}
	var proxy *Proxy
	if p := settings.Proxy; p.HTTPProxy != "" || p.HTTPSProxy != "" {
		proxy = &p
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
		Proxy:         proxy,
		PackageSource: settings.PackageSource,
		Versions:      versions,
		Registry:      settings.Registry,
		NodeUsers:     []NodeUser{},
	}, nil
}

// MaxWatchdogTimeoutSeconds is the longest softdog accepts: a soft_margin
// outside 1..65535 makes the module refuse to load.
const MaxWatchdogTimeoutSeconds = 65535

// watchdogTimeoutRE is the CRD's pattern of spec.fencing.watchdog.timeout.
var watchdogTimeoutRE = regexp.MustCompile(`^([1-9][0-9]*)([smh])$`)

// resolveFencing is a fenced group's fencing with its defaults: mode
// Watchdog when empty (the CRD requires it; an object made in code may not
// say), timeout DefaultWatchdogTimeout. The timeout is checked again here,
// not only by the CRD: a stored object may predate the pattern, and in
// Watchdog mode it becomes softdog's soft_margin, which the kernel bounds.
func resolveFencing(f *deckhousev1.FencingSpec) (*Fencing, error) {
	out := &Fencing{Enabled: true, Mode: or(f.Mode, deckhousev1.FencingModeWatchdog), WatchdogTimeout: deckhousev1.DefaultWatchdogTimeout,
		AgentUID: deckhousev1.FencingAgentUID}
	if f.Watchdog != nil {
		out.WatchdogTimeout = or(f.Watchdog.Timeout, out.WatchdogTimeout)
	}
	switch out.Mode {
	case deckhousev1.FencingModeWatchdog, deckhousev1.FencingModeNotify:
	default:
		return nil, fmt.Errorf("spec.fencing.mode %q is neither %s nor %s", out.Mode, deckhousev1.FencingModeWatchdog, deckhousev1.FencingModeNotify)
	}
	m := watchdogTimeoutRE.FindStringSubmatch(out.WatchdogTimeout)
	if m == nil {
		return nil, fmt.Errorf("spec.fencing.watchdog.timeout %q is not a whole number of seconds, minutes or hours such as 60s, 2m or 1h", out.WatchdogTimeout)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n > math.MaxInt32/3600 {
		return nil, fmt.Errorf("spec.fencing.watchdog.timeout %q is too long; choose a timeout of minutes, such as 60s or 2m", out.WatchdogTimeout)
	}
	out.WatchdogTimeoutSeconds = n * map[string]int{"s": 1, "m": 60, "h": 3600}[m[2]]
	if out.Mode == deckhousev1.FencingModeWatchdog && out.WatchdogTimeoutSeconds > MaxWatchdogTimeoutSeconds {
		return nil, fmt.Errorf("spec.fencing.watchdog.timeout %s is %d seconds, longer than the %d seconds (18h12m15s) softdog accepts as soft_margin; choose a shorter timeout",
			out.WatchdogTimeout, out.WatchdogTimeoutSeconds, MaxWatchdogTimeoutSeconds)
	}
	return out, nil
}

// resolveKubelet is the group's kubelet settings with every default filled
// in; maxPods defaults from the per-node pod subnet prefix.
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
	if k.FailCgroupV1 != nil {
		out.FailCgroupV1 = ptr.To(*k.FailCgroupV1)
	}
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

// quantity is q in canonical form, empty when q is not set.
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

// or is s, or def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
