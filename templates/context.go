package templates

import (
	"encoding/json"
	"fmt"
)

// Context is everything a template of one node group may read: the built-in
// templates and users' NodeGroupConfiguration steps see the same values.
// Templates address fields by their JSON names (`{{ .nodeGroup.name }}`,
// `{{ .normal.apiserverEndpoints }}`); every key is always present, with
// the documented default when the cluster does not say, so a misspelt or
// unknown name is a render error rather than an empty string.
//
// Presence follows Deckhouse's context: a feature that is off there leaves
// its key out or empty, so a user's `{{ if .proxy }}` is false. Here such a
// key is present with the value null (a nil pointer or map): `if` and
// `with` treat it as false, and reading a field of it is a render error
// naming the key, where Deckhouse would print "<no value>". The keys
// Deckhouse has and this project never fills (cloudProvider, packagesProxy,
// clusterBootstrap, images, bundle) are always null.
//
// What a group's nodes receive depends only on this structure and the
// template tree: fields that must not roll nodes when they change (scaling
// counters, update and drain settings, disruption windows) are deliberately
// absent.
type Context struct {
	// RunType is always "Normal": bashible applies the bundle on a running node.
	RunType string `json:"runType" render:"word"`
	// NodeGroup is the group's resolved configuration.
	NodeGroup NodeGroup `json:"nodeGroup"`
	// KubernetesVersion is the group's effective Kubernetes minor, such as
	// "1.36": nodeGroup.kubernetesVersion, else the cluster's.
	KubernetesVersion string `json:"kubernetesVersion" render:"word"`
	// CRI is the group's container runtime: Containerd, ContainerdV2 or
	// NotManaged (nodeGroup.cri.type, else the cluster's defaultCRI).
	CRI string `json:"cri" render:"word"`
	// Cluster holds cluster-wide settings.
	Cluster Cluster `json:"cluster"`
	// Normal holds what a node needs to reach and trust the API. The name is
	// Deckhouse's, kept so existing NodeGroupConfigurations render.
	Normal Normal `json:"normal"`
	// Proxy is the HTTP proxy nodes use; nil (null) when the cluster sets
	// none, as Deckhouse leaves it out, so `{{ if .proxy }}` is false.
	Proxy *Proxy `json:"proxy"`
	// PackageSource is where nodes download Kubernetes and containerd.
	PackageSource PackageSource `json:"packageSource"`
	// Versions is what this group's nodes install, from the version map:
	// only the group's own Kubernetes minor and containerd line.
	Versions Versions `json:"versions"`
	// Registry is how containerd reaches container registries.
	Registry Registry `json:"registry"`

	// The keys below are Deckhouse's and stay null: this project has no
	// such feature, and a step written for Deckhouse that tests them
	// (`{{ if .packagesProxy }}`) renders as it does there with the
	// feature off.

	// CloudProvider is Deckhouse's cloud provider settings, present there for
	// groups of a cluster with a cloud provider; node-manager orders no cloud
	// machines, so it is always nil.
	CloudProvider map[string]any `json:"cloudProvider"`
	// PackagesProxy is Deckhouse's registry packages proxy ({addresses,
	// token}); node-manager downloads from PackageSource instead, so it is
	// always nil.
	PackagesProxy map[string]any `json:"packagesProxy"`
	// ClusterBootstrap is what Deckhouse's installer adds when it renders
	// the first master (runType ClusterBootstrap); bundles here are always
	// runType Normal, so it is always nil.
	ClusterBootstrap map[string]any `json:"clusterBootstrap"`
	// Images is Deckhouse's map of its modules' image digests; node-manager
	// ships no images to nodes, so it is always nil.
	Images map[string]any `json:"images"`
	// Bundle is the OS bundle in older Deckhouse versions, which rendered a
	// bundle per OS; one bundle here serves every OS (a step selects its
	// OS with spec.bundles or BASHIBLE_BUNDLE on the node), so it is always
	// nil, as in newer Deckhouse versions, which dropped it.
	Bundle *string `json:"bundle"`
	// NodeUsers are the NodeUsers that select the group (spec.nodeGroups
	// holds its name or "*"), sorted by name, in Deckhouse's shape
	// ({name, spec}); an empty list when none does. They are part of the
	// group's configuration checksum: adding, changing or removing one
	// rolls the nodes of the groups it selects, and only those.
	NodeUsers []NodeUser `json:"nodeUsers"`
}

// NodeUser is an element of nodeUsers: a NodeUser's name and spec, with
// Deckhouse's keys (the spec as the API stores it, defaults applied).
type NodeUser struct {
	// Name is the user's name (the object's name).
	Name string       `json:"name" render:"word"`
	Spec NodeUserSpec `json:"spec"`
}

// NodeUserSpec is a NodeUser's spec as Deckhouse's templates read it.
// sshPublicKey (deprecated) is present only when the object sets it;
// every other key is always present.
type NodeUserSpec struct {
	UID           int64    `json:"uid"`
	SSHPublicKey  string   `json:"sshPublicKey,omitempty"`
	SSHPublicKeys []string `json:"sshPublicKeys"`
	// PasswordHash is a credential (an offline-crackable hash): kept out
	// of errors and redacted where the context is shown (Redacted).
	PasswordHash string   `json:"passwordHash" render:"secret"`
	IsSudoer     bool     `json:"isSudoer"`
	ExtraGroups  []string `json:"extraGroups" render:"word"`
	NodeGroups   []string `json:"nodeGroups"`
}

// PackageSource holds base URLs (no trailing slash) under which nodes find
// files in the upstream layout. Both default to upstream; ClusterConfiguration
// packageSource.url <U> makes them <U>/kubernetes and <U>/containerd.
type PackageSource struct {
	// Kubernetes: <base>/v<version>/bin/linux/<arch>/{kubelet,kubectl}.
	// Default https://dl.k8s.io/release.
	Kubernetes string `json:"kubernetes" render:"url,secret=url"`
	// Containerd: <base>/v<version>/containerd-<version>-linux-<arch>.tar.gz.
	// Default https://github.com/containerd/containerd/releases/download.
	Containerd string `json:"containerd" render:"url,secret=url"`
}

// Versions is the group's part of the version map (versions.yaml, with the
// cluster's packageSource.versions over it).
type Versions struct {
	// Kubernetes is the release of the group's minor: version (such as
	// 1.36.3) and sha256.{kubelet,kubectl}.{amd64,arm64}.
	Kubernetes KubernetesRelease `json:"kubernetes"`
	// Containerd is the release for the group's cri.type: version and
	// sha256.{amd64,arm64} of the release archive. Empty for NotManaged.
	Containerd ContainerdRelease `json:"containerd"`
	// SandboxImage is the pod sandbox image, such as registry.k8s.io/pause:3.10.1.
	SandboxImage string `json:"sandboxImage" render:"word"`
	// BasePackages maps each bundle (debian, ubuntu-lts, centos) to the OS
	// packages every node gets.
	BasePackages map[string][]string `json:"basePackages" render:"word"`
}

// Registry is how containerd reaches container registries.
type Registry struct {
	// Mirrors, sorted by host; empty when there are none.
	Mirrors []RegistryMirror `json:"mirrors"`
}

// RegistryMirror sends pulls from one registry host to other endpoints.
type RegistryMirror struct {
	// Host is the registry as images name it: docker.io, registry.k8s.io,
	// registry.corp:5000.
	Host string `json:"host" render:"word"`
	// Endpoints are tried in order (http:// or https:// URLs), then the host itself.
	Endpoints []string `json:"endpoints" render:"url,secret=url"`
	// CA (PEM) the endpoints' certificates are checked against; empty for
	// the system trust.
	CA string `json:"ca" render:"multiline,pem"`
	// Auth is base64 of "user:password" for the endpoints, empty for none.
	Auth string `json:"auth" render:"word,secret=basic"`
}

// NodeGroup is a group's configuration as templates see it.
type NodeGroup struct {
	// Name of the group.
	Name string `json:"name" render:"word"`
	// NodeType is CloudEphemeral, CloudPermanent, CloudStatic or Static.
	NodeType string `json:"nodeType" render:"word"`
	// KubernetesVersion is the effective minor (the same as the top-level field).
	KubernetesVersion string `json:"kubernetesVersion" render:"word"`
	// CRI is the container runtime configuration.
	CRI CRI `json:"cri"`
	// Kubelet is the kubelet configuration, with defaults applied.
	Kubelet Kubelet `json:"kubelet"`
	// Disruptions: only the approval mode reaches nodes (RollingUpdate makes
	// the node stop and ask for replacement); windows stay in the cluster.
	Disruptions Disruptions `json:"disruptions"`
	// NodeTemplate is what the node registers with: labels, annotations, taints.
	NodeTemplate NodeTemplate `json:"nodeTemplate"`
	// Fencing is the group's fencing: nil (null) when the group has no
	// spec.fencing, as in Deckhouse.
	Fencing *Fencing `json:"fencing"`
	// CloudInstances is the instance class of the group; nil (null) when
	// the NodeGroup has no spec.cloudInstances (every type but
	// CloudEphemeral), as in Deckhouse, so `{{ if .nodeGroup.cloudInstances }}`
	// is false. Scaling counters and zones are not part of the context.
	CloudInstances *CloudInstances `json:"cloudInstances"`
	// Static is Deckhouse's .nodeGroup.static: nil (null) unless the group
	// is Static and the cluster has a StaticClusterConfiguration
	// (kube-system/d8-static-cluster-configuration), as in Deckhouse.
	Static *StaticNodes `json:"static"`
}

// StaticNodes is what the cluster's StaticClusterConfiguration says about
// static nodes.
type StaticNodes struct {
	// InternalNetworkCIDRs are the networks of the cluster's internal
	// traffic, in order; the kubelet registers with the node's first address
	// in the first of them that holds one (--node-ip). May be empty.
	InternalNetworkCIDRs []string `json:"internalNetworkCIDRs" render:"word"`
}

// CRI is the container runtime configuration.
type CRI struct {
	// Type is Containerd, ContainerdV2 or NotManaged.
	Type string `json:"type" render:"word"`
	// Containerd tunes a managed containerd (both Containerd and ContainerdV2).
	Containerd Containerd `json:"containerd"`
	// NotManaged describes a runtime someone else installed.
	NotManaged NotManagedCRI `json:"notManaged"`
}

// Containerd tunes a managed containerd.
type Containerd struct {
	// MaxConcurrentDownloads defaults to 3.
	MaxConcurrentDownloads int32 `json:"maxConcurrentDownloads"`
	// RestrictOOMScoreAdj is the group's
	// cri.containerd(V2).restrictOOMScoreAdj, false when unset: containerd
	// asks for no OOM score below its own (for machines without
	// CAP_SYS_RESOURCE).
	RestrictOOMScoreAdj bool `json:"restrictOOMScoreAdj"`
}

// NotManagedCRI describes a runtime someone else installed.
type NotManagedCRI struct {
	// CRISocketPath defaults to /run/containerd/containerd.sock.
	CRISocketPath string `json:"criSocketPath"`
}

// Kubelet is the kubelet configuration with defaults applied.
type Kubelet struct {
	// MaxPods: the group's value, else derived from the pod subnet prefix
	// per node (120 for /24 or longer, 250 for /23, 500 for /22, 1000 for /21
	// or shorter).
	MaxPods int32 `json:"maxPods"`
	// RootDir defaults to /var/lib/kubelet.
	RootDir string `json:"rootDir" render:"word"`
	// ContainerLogMaxSize defaults to 50Mi.
	ContainerLogMaxSize string `json:"containerLogMaxSize" render:"word"`
	// ContainerLogMaxFiles defaults to 4.
	ContainerLogMaxFiles int32 `json:"containerLogMaxFiles"`
	// SeccompDefault defaults to false.
	SeccompDefault bool `json:"seccompDefault"`
	// ResourceReservation defaults to mode Auto.
	ResourceReservation ResourceReservation `json:"resourceReservation"`
	// TopologyManager defaults to disabled, scope Container, policy None.
	TopologyManager TopologyManager `json:"topologyManager"`
	// MemorySwap defaults to NoSwap with swappiness 60.
	MemorySwap MemorySwap `json:"memorySwap"`
	// FailCgroupV1 is the group's kubelet.failCgroupV1; nil (null) when
	// unset, and then not rendered, so each Kubernetes version keeps its
	// own default (false up to 1.34, true from 1.35).
	FailCgroupV1 *bool `json:"failCgroupV1"`
}

// ResourceReservation reserves resources for the system.
type ResourceReservation struct {
	// Mode is Off, Auto or Static.
	Mode string `json:"mode" render:"word"`
	// Static amounts (Kubernetes quantities), empty unless mode is Static.
	Static StaticReservation `json:"static"`
}

// StaticReservation holds fixed amounts as Kubernetes quantity strings.
type StaticReservation struct {
	CPU              string `json:"cpu" render:"word"`
	Memory           string `json:"memory" render:"word"`
	EphemeralStorage string `json:"ephemeralStorage" render:"word"`
}

// TopologyManager configures NUMA-aware placement.
type TopologyManager struct {
	Enabled bool   `json:"enabled"`
	Scope   string `json:"scope" render:"word"`
	Policy  string `json:"policy" render:"word"`
}

// MemorySwap configures swap.
type MemorySwap struct {
	// SwapBehavior is NoSwap or LimitedSwap.
	SwapBehavior string `json:"swapBehavior" render:"word"`
	// Swappiness is vm.swappiness.
	Swappiness int32 `json:"swappiness"`
	// LimitedSwapSize is the swap file size such as 4G, empty unless LimitedSwap.
	LimitedSwapSize string `json:"limitedSwapSize" render:"word"`
}

// Disruptions is the part of the disruption policy nodes act on.
type Disruptions struct {
	// ApprovalMode is Manual, Automatic or RollingUpdate.
	ApprovalMode string `json:"approvalMode" render:"word"`
}

// NodeTemplate is the metadata a node registers with.
type NodeTemplate struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Taints      []Taint           `json:"taints"`
}

// Taint is a node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

// Fencing is a fenced group's fencing: the mode says whether its nodes arm
// a watchdog, the timeout how long a node that stopped feeding it lives.
type Fencing struct {
	// Enabled is true: a group without fencing has no Fencing.
	Enabled bool `json:"enabled"`
	// Mode is Watchdog (the node's softdog panics it when the fencing agent
	// stops feeding it) or Notify (no watchdog: the node is only reported),
	// deckhousev1.FencingModeWatchdog or FencingModeNotify.
	Mode string `json:"mode" render:"word"`
	// WatchdogTimeout is spec.fencing.watchdog.timeout as the group gives
	// it, such as 60s or 2m; default 60s.
	WatchdogTimeout string `json:"watchdogTimeout" render:"word"`
	// WatchdogTimeoutSeconds is WatchdogTimeout in seconds, softdog's
	// soft_margin.
	WatchdogTimeoutSeconds int `json:"watchdogTimeoutSeconds"`
	// AgentUID is the user the fencing agent runs as
	// (deckhousev1.FencingAgentUID): in Watchdog mode the node step gives
	// it the watchdog device.
	AgentUID int `json:"agentUID"`
}

// CloudInstances is the instance class of a CloudEphemeral group.
type CloudInstances struct {
	ClassReference ClassReference `json:"classReference"`
}

// ClassReference names an instance class.
type ClassReference struct {
	Kind string `json:"kind" render:"word"`
	Name string `json:"name" render:"word"`
}

// Cluster holds cluster-wide settings, from ClusterConfiguration in Secret
// kube-system/d8-cluster-configuration, with defaults for what it omits.
type Cluster struct {
	// ClusterDomain defaults to cluster.local.
	ClusterDomain string `json:"clusterDomain" render:"word"`
	// ClusterDNSAddress defaults to the tenth address of the service subnet.
	ClusterDNSAddress string `json:"clusterDNSAddress" render:"word"`
	// PodSubnetCIDR defaults to 10.111.0.0/16.
	PodSubnetCIDR string `json:"podSubnetCIDR" render:"word"`
	// ServiceSubnetCIDR defaults to 10.222.0.0/16.
	ServiceSubnetCIDR string `json:"serviceSubnetCIDR" render:"word"`
	// PodSubnetNodeCIDRPrefix defaults to 24.
	PodSubnetNodeCIDRPrefix int `json:"podSubnetNodeCIDRPrefix"`
	// DefaultCRI defaults to Containerd.
	DefaultCRI string `json:"defaultCRI" render:"word"`
	// KubernetesVersion is the cluster's minor, default DefaultKubernetesVersion.
	KubernetesVersion string `json:"kubernetesVersion" render:"word"`
	// ExtraCACertificates are PEM certificates every node trusts in addition
	// to its OS's (for a proxy or a mirror that re-signs TLS); empty by default.
	ExtraCACertificates []string `json:"extraCACertificates" render:"multiline,pem"`
}

// Normal holds what a node needs to reach and trust the API.
type Normal struct {
	// BootstrapTokenPath is where a joining node keeps its bootstrap token.
	BootstrapTokenPath string `json:"bootstrapTokenPath" render:"word"`
	// ClusterDomain repeats cluster.clusterDomain.
	ClusterDomain string `json:"clusterDomain" render:"word"`
	// ClusterDNSAddress repeats cluster.clusterDNSAddress.
	ClusterDNSAddress string `json:"clusterDNSAddress" render:"word"`
	// APIServerEndpoints are host:port of every API server, sorted, from the
	// default/kubernetes EndpointSlices; empty when there are none.
	APIServerEndpoints []string `json:"apiserverEndpoints" render:"word"`
	// KubernetesCA is the cluster CA (PEM) from kube-system/kube-root-ca.crt.
	KubernetesCA string `json:"kubernetesCA" render:"multiline,pem"`
}

// Proxy is the HTTP proxy for nodes. The context carries one only when the
// cluster sets httpProxy or httpsProxy.
type Proxy struct {
	HTTPProxy  string `json:"httpProxy" render:"secret=url"`
	HTTPSProxy string `json:"httpsProxy" render:"secret=url"`
	// NoProxy always starts with the loopback, metadata-service, cluster
	// domain, pod and service subnets when a proxy is set.
	NoProxy []string `json:"noProxy"`
}

// Values returns the context as templates see it: nested maps keyed by the
// JSON field names.
func (c *Context) Values() (map[string]any, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode render context: %w", err)
	}
	var values map[string]any
	if err := json.Unmarshal(data, &values); err != nil {
		return nil, fmt.Errorf("decode render context: %w", err)
	}
	return values, nil
}
