package v1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MaxNameLength is the longest NodeGroup name: names end up in label values
// (at most 63 characters) together with a 21-character hash suffix.
const MaxNameLength = 42

// NodeGroup describes a set of nodes configured alike: their type, container
// runtime, kubelet settings, update and disruption policy, and the labels,
// annotations and taints every node of the group carries.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=ng,categories=deckhouse
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.nodeType`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="UpToDate",type=integer,JSONPath=`.status.upToDate`
// +kubebuilder:printcolumn:name="Pinned",type=integer,JSONPath=`.spec.update.pinnedRevision`,description="The bundle revision the group is pinned to, empty when it follows the current configuration"
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.instances`,priority=1
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desired`,priority=1
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.status.min`,priority=1
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.status.max`,priority=1
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditionSummary.statusMessage`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 42",message="metadata.name: must be at most 42 characters (node labels derived from it carry a 21-character hash)",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name: must consist of lowercase letters, digits and '-', and start and end with a letter or digit (regex ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)",reason=FieldValueInvalid
type NodeGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired configuration of the group's nodes.
	// +required
	Spec NodeGroupSpec `json:"spec"`
	// Status is observed state, written by node-manager's controllers.
	// +optional
	Status NodeGroupStatus `json:"status,omitempty"`
}

// NodeType says who creates a group's machines and how node-manager treats them.
// +kubebuilder:validation:Enum=CloudEphemeral;CloudPermanent;CloudStatic;Static
type NodeType string

const (
	// NodeTypeCloudEphemeral nodes are created and deleted on demand by a machine controller.
	NodeTypeCloudEphemeral NodeType = "CloudEphemeral"
	// NodeTypeCloudPermanent nodes are long-lived cloud machines created by the installer.
	NodeTypeCloudPermanent NodeType = "CloudPermanent"
	// NodeTypeCloudStatic nodes are machines created by hand in an integrated cloud.
	NodeTypeCloudStatic NodeType = "CloudStatic"
	// NodeTypeStatic nodes are bare metal or virtual machines with no cloud integration.
	NodeTypeStatic NodeType = "Static"
)

// NodeGroupEngine is what makes a group's machines (status.engine).
type NodeGroupEngine string

// The values of status.engine, Deckhouse's.
const (
	// NodeGroupEngineNone: nothing makes the group's machines.
	NodeGroupEngineNone NodeGroupEngine = "None"
	// NodeGroupEngineMCM: Deckhouse's machine-controller-manager (never
	// written by node-manager).
	NodeGroupEngineMCM NodeGroupEngine = "MCM"
	// NodeGroupEngineCAPI: Cluster API.
	NodeGroupEngineCAPI NodeGroupEngine = "CAPI"
)

// NodeGroupSpec is the desired configuration of a group's nodes.
//
// +kubebuilder:validation:XValidation:rule="self.nodeType != 'CloudEphemeral' || has(self.cloudInstances)",message="cloudInstances is required when nodeType is CloudEphemeral",fieldPath=".cloudInstances",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.nodeType == 'CloudEphemeral' || !has(self.cloudInstances)",message="cloudInstances is allowed only when nodeType is CloudEphemeral",fieldPath=".cloudInstances",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.nodeType in ['Static', 'CloudStatic'] || !has(self.staticInstances)",message="staticInstances is allowed only when nodeType is Static or CloudStatic",fieldPath=".staticInstances",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.disruptions) || !has(self.disruptions.approvalMode) || self.disruptions.approvalMode != 'RollingUpdate' || self.nodeType == 'CloudEphemeral'",message="it is forbidden to set .spec.disruptions.approvalMode to \"RollingUpdate\" when spec.nodeType is not \"CloudEphemeral\"",fieldPath=".disruptions.approvalMode",reason=FieldValueForbidden
type NodeGroupSpec struct {
	// NodeType is one of CloudEphemeral, CloudPermanent, CloudStatic or
	// Static. It cannot be changed once set (as in Deckhouse): a group's
	// node type decides who creates and removes its machines.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message=".spec.nodeType field is immutable",reason=FieldValueForbidden
	NodeType NodeType `json:"nodeType"`

	// KubernetesVersion pins the group's kubelet to a Kubernetes minor version
	// such as "1.36". When empty, the cluster's version applies.
	// +optional
	// +kubebuilder:validation:Pattern=`^1\.[0-9]{1,3}$`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// CRI configures the container runtime. When empty, the cluster's default applies.
	// +optional
	CRI *CRISpec `json:"cri,omitempty"`

	// Kubelet configures the kubelet of every node in the group.
	// +optional
	Kubelet *KubeletSpec `json:"kubelet,omitempty"`

	// Disruptions says how updates that disrupt workloads (such as a
	// container runtime restart) are approved.
	// +optional
	// +kubebuilder:default={approvalMode: Automatic}
	Disruptions *DisruptionsSpec `json:"disruptions,omitempty"`

	// Update limits how many nodes are updated at once.
	// +optional
	// +kubebuilder:default={maxConcurrent: 1}
	Update *UpdateSpec `json:"update,omitempty"`

	// NodeTemplate holds labels, annotations and taints kept on every node of the group.
	// +optional
	NodeTemplate *NodeTemplate `json:"nodeTemplate,omitempty"`

	// Chaos configures the chaos monkey, which drains and deletes a random
	// machine of a healthy group from time to time.
	// +optional
	Chaos *ChaosSpec `json:"chaos,omitempty"`

	// OperatingSystem is kept for compatibility; it has no effect.
	// +optional
	OperatingSystem *OperatingSystemSpec `json:"operatingSystem,omitempty"`

	// StaticInstances selects StaticInstance machines for a Static or CloudStatic group.
	// +optional
	StaticInstances *StaticInstancesSpec `json:"staticInstances,omitempty"`

	// CloudInstances describes the machines of a CloudEphemeral group.
	// +optional
	CloudInstances *CloudInstancesSpec `json:"cloudInstances,omitempty"`

	// Fencing enables node fencing: a node that loses the API is reset by its
	// watchdog and its Node object is removed.
	// +optional
	Fencing *FencingSpec `json:"fencing,omitempty"`

	// GPU describes how the GPUs of the group's nodes are shared, as in
	// Deckhouse (Enterprise Edition, 1.71 and later), where it deploys
	// NVIDIA's device plugin, feature discovery, DCGM exporter and MIG
	// manager and sets containerd's default runtime. Accepted so that
	// Deckhouse's manifests apply unchanged; nothing in this deployment
	// acts on it (the admission policy warns and the InertFields
	// condition says so).
	// +optional
	GPU *GPUSpec `json:"gpu,omitempty"`

	// NodeDrainTimeoutSecond is the deadline of a drain of the group's
	// nodes; disruptions.automatic.drainTimeoutPolicy says what happens to
	// the pods left then. When empty, 300 seconds (5 minutes).
	// +optional
	// +kubebuilder:validation:Minimum=1
	NodeDrainTimeoutSecond *int32 `json:"nodeDrainTimeoutSecond,omitempty"`
}

// CRIType names a container runtime.
// +kubebuilder:validation:Enum=Docker;Containerd;ContainerdV2;NotManaged
type CRIType string

const (
	// CRIContainerd is containerd 1.7, managed by node-manager.
	CRIContainerd CRIType = "Containerd"
	// CRIContainerdV2 is containerd 2, managed by node-manager.
	CRIContainerdV2 CRIType = "ContainerdV2"
	// CRINotManaged leaves the container runtime to the machine's owner.
	CRINotManaged CRIType = "NotManaged"
	// CRIDocker is Deckhouse's deprecated Docker runtime. It is accepted so
	// that Deckhouse's stored groups keep applying, and has no effect: the
	// group's nodes get the cluster's defaultCRI, as if cri.type were
	// unset (node-manager runs no Docker; the admission policy warns and
	// the InertFields condition says so).
	CRIDocker CRIType = "Docker"
)

// CRISpec configures the container runtime; only the sub-object that matches type may be set.
//
// +kubebuilder:validation:XValidation:rule="!has(self.containerd) || (has(self.type) && self.type == 'Containerd')",message="cri.containerd is allowed only when cri.type is Containerd",fieldPath=".containerd",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.containerdV2) || (has(self.type) && self.type == 'ContainerdV2')",message="cri.containerdV2 is allowed only when cri.type is ContainerdV2",fieldPath=".containerdV2",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.notManaged) || (has(self.type) && self.type == 'NotManaged')",message="cri.notManaged is allowed only when cri.type is NotManaged",fieldPath=".notManaged",reason=FieldValueForbidden
type CRISpec struct {
	// Type is Containerd, ContainerdV2 or NotManaged. When empty, the
	// cluster's default applies. Docker (deprecated in Deckhouse) is
	// accepted and treated as empty.
	// +optional
	Type CRIType `json:"type,omitempty"`
	// Containerd tunes containerd when type is Containerd.
	// +optional
	Containerd *ContainerdSpec `json:"containerd,omitempty"`
	// ContainerdV2 tunes containerd 2 when type is ContainerdV2.
	// +optional
	ContainerdV2 *ContainerdSpec `json:"containerdV2,omitempty"`
	// NotManaged describes a runtime node-manager does not install.
	// +optional
	NotManaged *NotManagedCRISpec `json:"notManaged,omitempty"`
	// Docker is Deckhouse's deprecated Docker settings, accepted with any
	// cri.type (as Deckhouse accepts it) and without effect.
	// +optional
	Docker *DockerSpec `json:"docker,omitempty"`
}

// DockerSpec is Deckhouse's deprecated Docker settings; nothing acts on
// them here.
type DockerSpec struct {
	// MaxConcurrentDownloads was dockerd's max-concurrent-downloads.
	// +optional
	MaxConcurrentDownloads *int32 `json:"maxConcurrentDownloads,omitempty"`
	// Manage was whether bashible maintained Docker.
	// +optional
	Manage *bool `json:"manage,omitempty"`
}

// ContainerdSpec tunes a managed containerd.
type ContainerdSpec struct {
	// MaxConcurrentDownloads is how many image layers are pulled at once.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxConcurrentDownloads *int32 `json:"maxConcurrentDownloads,omitempty"`
	// RestrictOOMScoreAdj makes containerd never ask for an OOM score
	// adjustment below its own (CRI restrict_oom_score_adj). Set it on
	// machines where containerd lacks CAP_SYS_RESOURCE, such as nodes in a
	// container or in some microVMs: there every pod sandbox fails with
	// "failed to update /proc/self/oom_score_adj: Permission denied". When
	// unset, containerd's default (false) applies and nothing is rendered.
	// +optional
	RestrictOOMScoreAdj bool `json:"restrictOOMScoreAdj,omitempty"`
}

// NotManagedCRISpec describes a container runtime installed by someone else.
type NotManagedCRISpec struct {
	// CRISocketPath is the runtime's socket, such as /run/containerd/containerd.sock:
	// an absolute path of letters, digits, ".", "_", "-" and "/", at most 107
	// characters (what a Unix socket address holds).
	// +optional
	// +kubebuilder:validation:MaxLength=107
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_.-]+)+$`
	CRISocketPath string `json:"criSocketPath,omitempty"`
}

// KubeletSpec configures the kubelet.
//
// +kubebuilder:validation:XValidation:rule="!has(self.topologyManager) || !has(self.topologyManager.enabled) || !self.topologyManager.enabled || !has(self.resourceReservation) || !has(self.resourceReservation.mode) || self.resourceReservation.mode != 'Off'",message=".spec.kubelet.resourceReservation must be enabled for .spec.kubelet.topologyManager.enabled to work",fieldPath=".resourceReservation",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.topologyManager) || !has(self.topologyManager.enabled) || !self.topologyManager.enabled || !has(self.resourceReservation) || !has(self.resourceReservation.mode) || self.resourceReservation.mode != 'Static' || (has(self.resourceReservation.static) && has(self.resourceReservation.static.cpu))",message="for .spec.kubelet.topologyManager.enabled and .spec.kubelet.resourceReservation.mode == \"Static\", .spec.kubelet.resourceReservation.static.cpu must be specified",fieldPath=".resourceReservation.static",reason=FieldValueRequired
type KubeletSpec struct {
	// MaxPods is the most pods the kubelet runs. When empty, it follows the
	// pod subnet prefix per node: 120 for /24 or longer, 250 for /23, 500 for
	// /22, 1000 for /21 or shorter.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxPods *int32 `json:"maxPods,omitempty"`
	// RootDir is the kubelet's data directory: an absolute path of at least
	// two components (the static-node cleanup removes it, so "/" or "/var"
	// are refused), of letters, digits, ".", "_" and "-".
	// +optional
	// +kubebuilder:default="/var/lib/kubelet"
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_][A-Za-z0-9._-]*){2,}$`
	RootDir string `json:"rootDir,omitempty"`
	// ContainerLogMaxSize is the size at which a container log is rotated.
	// +optional
	// +kubebuilder:default="50Mi"
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]*(Ki|Mi|Gi)$`
	ContainerLogMaxSize string `json:"containerLogMaxSize,omitempty"`
	// ContainerLogMaxFiles is how many rotated logs are kept per container.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	ContainerLogMaxFiles *int32 `json:"containerLogMaxFiles,omitempty"`
	// SeccompDefault runs every container with the RuntimeDefault seccomp profile.
	// +optional
	SeccompDefault bool `json:"seccompDefault,omitempty"`
	// ResourceReservation reserves CPU, memory and storage for the system.
	// +optional
	ResourceReservation *ResourceReservationSpec `json:"resourceReservation,omitempty"`
	// TopologyManager configures NUMA-aware placement. Enabling it needs a
	// resource reservation (mode Auto, or Static with static.cpu), as in
	// Deckhouse: the static CPU manager policy it turns on needs reserved CPU.
	// +optional
	TopologyManager *TopologyManagerSpec `json:"topologyManager,omitempty"`
	// MemorySwap configures swap for pods.
	// +optional
	MemorySwap *MemorySwapSpec `json:"memorySwap,omitempty"`
	// FailCgroupV1 is the kubelet's failCgroupV1: whether it refuses to
	// start on a host with cgroup v1. Kubernetes 1.35 and later refuse by
	// default; set false to run them on a cgroup v1 host (deprecated
	// upstream). When unset, nothing is rendered and each Kubernetes
	// version's own default applies.
	// +optional
	FailCgroupV1 *bool `json:"failCgroupV1,omitempty"`
}

// ResourceReservationMode says how system resources are reserved.
// +kubebuilder:validation:Enum=Off;Auto;Static
type ResourceReservationMode string

const (
	// ResourceReservationOff reserves nothing.
	ResourceReservationOff ResourceReservationMode = "Off"
	// ResourceReservationAuto reserves amounts computed from the node's capacity.
	ResourceReservationAuto ResourceReservationMode = "Auto"
	// ResourceReservationStatic reserves the amounts in static.
	ResourceReservationStatic ResourceReservationMode = "Static"
)

// ResourceReservationSpec reserves resources for the system.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'Static' || has(self.static)",message="kubelet.resourceReservation.static is required when mode is Static",fieldPath=".static",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.mode == 'Static' || !has(self.static)",message="kubelet.resourceReservation.static is allowed only when mode is Static",fieldPath=".static",reason=FieldValueForbidden
type ResourceReservationSpec struct {
	// Mode is Off, Auto or Static.
	// +optional
	// +kubebuilder:default=Auto
	Mode ResourceReservationMode `json:"mode,omitempty"`
	// Static holds the amounts reserved in Static mode.
	// +optional
	Static *StaticResourceReservation `json:"static,omitempty"`
}

// StaticResourceReservation holds fixed amounts reserved for the system.
type StaticResourceReservation struct {
	// CPU reserved for the system, such as 500m.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory reserved for the system, such as 1Gi.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// EphemeralStorage reserved for the system, such as 5Gi.
	// +optional
	EphemeralStorage *resource.Quantity `json:"ephemeralStorage,omitempty"`
}

// TopologyManagerSpec configures the kubelet's topology manager. Enabling it
// also turns on the static CPU manager policy when CPU is reserved for the
// system (resourceReservation mode Auto, or Static with a cpu above zero);
// the memory manager keeps its default policy, None.
type TopologyManagerSpec struct {
	// Enabled turns the topology manager on.
	// +optional
	// +kubebuilder:default=false
	Enabled bool `json:"enabled,omitempty"`
	// Scope is Container or Pod.
	// +optional
	// +kubebuilder:default=Container
	// +kubebuilder:validation:Enum=Container;Pod
	Scope string `json:"scope,omitempty"`
	// Policy is None, BestEffort, Restricted or SingleNumaNode.
	// +optional
	// +kubebuilder:default=None
	// +kubebuilder:validation:Enum=None;BestEffort;Restricted;SingleNumaNode
	Policy string `json:"policy,omitempty"`
}

// MemorySwapSpec configures swap.
//
// +kubebuilder:validation:XValidation:rule="!has(self.limitedSwap) || (has(self.swapBehavior) && self.swapBehavior == 'LimitedSwap')",message="kubelet.memorySwap.limitedSwap is allowed only when swapBehavior is LimitedSwap",fieldPath=".limitedSwap",reason=FieldValueForbidden
type MemorySwapSpec struct {
	// SwapBehavior is NoSwap (swap stays off for pods) or LimitedSwap.
	// +optional
	// +kubebuilder:validation:Enum=NoSwap;LimitedSwap
	SwapBehavior string `json:"swapBehavior,omitempty"`
	// Swappiness is the kernel's vm.swappiness.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Swappiness *int32 `json:"swappiness,omitempty"`
	// LimitedSwap sizes the swap file in LimitedSwap mode.
	// +optional
	LimitedSwap *LimitedSwapSpec `json:"limitedSwap,omitempty"`
}

// LimitedSwapSpec sizes the swap file.
type LimitedSwapSpec struct {
	// Size of the swap file in gigabytes, such as 4G.
	// +required
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]*G$`
	Size string `json:"size"`
}

// ApprovalMode says how disruptive updates are approved.
// +kubebuilder:validation:Enum=Manual;Automatic;RollingUpdate
type ApprovalMode string

const (
	// ApprovalManual waits for a person to annotate the node.
	ApprovalManual ApprovalMode = "Manual"
	// ApprovalAutomatic approves inside the windows, draining first by default.
	ApprovalAutomatic ApprovalMode = "Automatic"
	// ApprovalRollingUpdate replaces the node instead of disrupting it.
	ApprovalRollingUpdate ApprovalMode = "RollingUpdate"
)

// DisruptionsSpec says how disruptive updates are approved.
//
// +kubebuilder:validation:XValidation:rule="!has(self.automatic) || self.approvalMode == 'Automatic'",message="disruptions.automatic is allowed only when approvalMode is Automatic",fieldPath=".automatic",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || self.approvalMode == 'RollingUpdate'",message="disruptions.rollingUpdate is allowed only when approvalMode is RollingUpdate",fieldPath=".rollingUpdate",reason=FieldValueForbidden
type DisruptionsSpec struct {
	// ApprovalMode is Manual, Automatic or RollingUpdate.
	// +optional
	// +kubebuilder:default=Automatic
	ApprovalMode ApprovalMode `json:"approvalMode,omitempty"`
	// Automatic tunes Automatic mode.
	// +optional
	Automatic *AutomaticDisruptions `json:"automatic,omitempty"`
	// RollingUpdate tunes RollingUpdate mode.
	// +optional
	RollingUpdate *RollingUpdateDisruptions `json:"rollingUpdate,omitempty"`
}

// AutomaticDisruptions tunes Automatic approval.
type AutomaticDisruptions struct {
	// DrainBeforeApproval drains the node before approving the disruption.
	// +optional
	// +kubebuilder:default=true
	DrainBeforeApproval *bool `json:"drainBeforeApproval,omitempty"`
	// Windows limit approvals to these UTC time windows; none means any time.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Windows []DisruptionWindow `json:"windows,omitempty"`
	// DrainTimeoutPolicy says what happens when a drain of one of the
	// group's nodes passes its deadline (nodeDrainTimeoutSecond) with pods
	// it could not evict (usually a PodDisruptionBudget refuses): Delete
	// (the default, Deckhouse's behaviour) deletes them, records an Event
	// on the Node for each, and the drain finishes; Wait never bypasses a
	// PodDisruptionBudget: evictions are retried and the node stays
	// drain-failed until they succeed. It applies to every drain of the
	// group's nodes (Manual and RollingUpdate groups, which have no
	// automatic block, get Delete).
	// +optional
	// +kubebuilder:default=Delete
	DrainTimeoutPolicy DrainTimeoutPolicy `json:"drainTimeoutPolicy,omitempty"`
}

// DrainTimeoutPolicy says what a drain does with the pods it could not
// evict by its deadline.
// +kubebuilder:validation:Enum=Delete;Wait
type DrainTimeoutPolicy string

const (
	// DrainTimeoutDelete deletes the pods left at the deadline.
	DrainTimeoutDelete DrainTimeoutPolicy = "Delete"
	// DrainTimeoutWait keeps evicting; nothing bypasses a PodDisruptionBudget.
	DrainTimeoutWait DrainTimeoutPolicy = "Wait"
)

// RollingUpdateDisruptions tunes RollingUpdate approval.
type RollingUpdateDisruptions struct {
	// Windows limit replacements to these UTC time windows; none means any time.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Windows []DisruptionWindow `json:"windows,omitempty"`
}

// Weekday is a day of the week in its three-letter English form.
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// DisruptionWindow is a daily UTC time window, optionally limited to some days.
type DisruptionWindow struct {
	// From is the window's start, HH:MM in UTC.
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	From string `json:"from"`
	// To is the window's end, HH:MM in UTC.
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	To string `json:"to"`
	// Days the window applies on; none means every day.
	// +optional
	// +kubebuilder:validation:MaxItems=7
	Days []Weekday `json:"days,omitempty"`
}

// UpdateSpec limits concurrent updates.
type UpdateSpec struct {
	// MaxConcurrent is how many nodes of the group may be approved for an
	// update at once: a positive number or a percentage of the group's nodes
	// (rounded down, at least one).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : (self.matches('^[1-9][0-9]*%?$') && (!self.endsWith('%') || int(self.replace('%', '')) <= 100))",message="update.maxConcurrent must be a positive number or a percentage from 1% to 100%, such as 1, 2 or \"40%\"",reason=FieldValueInvalid
	MaxConcurrent *intstr.IntOrString `json:"maxConcurrent,omitempty"`
	// Canaries is how many nodes take a new configuration first, before
	// the rest of the group (at most maxConcurrent at a time). Should one
	// of them fail to apply it (its Instance's BashibleReady turns False)
	// or go NotReady after applying it, the rollout halts (condition
	// RolloutHalted) until a new configuration or the annotation
	// update.node.deckhouse.io/resume-rollout resumes it. Unset or 0: no
	// canaries. Deckhouse has no such field; its clients ignore it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Canaries *int32 `json:"canaries,omitempty"`
	// SoakTime is how long the nodes of each batch (the canaries first,
	// then maxConcurrent nodes at a time) must run the new configuration,
	// Ready and without a failed bashible run, before the next batch is
	// approved; a failure within it halts the rollout as a canary's does.
	// A duration such as 10m or 1h30m, from 1s to 24h. Unset: batches
	// follow each other without soaking (and, without canaries, nodes are
	// approved as slots free up, as with Deckhouse).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="update.soakTime must be a duration from 1s to 24h, such as 30s, 10m or 1h30m",reason=FieldValueInvalid
	SoakTime *metav1.Duration `json:"soakTime,omitempty"`
	// PinnedRevision pins the group to one of the bundle revisions
	// bashible-apiserver keeps (listed in nodegroupbundles/<group> under
	// revisions): the group's nodes receive that revision's bundle and
	// checksum instead of the current configuration's, and converge to it
	// through the usual update approval. Removing it resumes the current
	// configuration. A pin to a revision that is not kept is reported by the
	// group's Pinned condition and changes nothing the nodes receive. A pin
	// to a revision rendered under other cluster settings than the current
	// ones (cluster configuration, static cluster configuration, cluster
	// CA) is refused: the nodes receive the current bundle and the Pinned
	// condition is False (ClusterSettingsChanged), unless a cluster
	// administrator annotates the group
	// node-manager.deckhouse.io/allow-pin-across-cluster-settings=<revision>.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="update.pinnedRevision must be a revision number (1 or more) listed in kubectl get nodegroupbundles <group> -o yaml",reason=FieldValueInvalid
	PinnedRevision *int64 `json:"pinnedRevision,omitempty"`
}

// TaintEffect is what a taint does to pods that do not tolerate it.
// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
type TaintEffect string

// Taint is a taint kept on every node of the group.
type Taint struct {
	// Key of the taint: a qualified name such as example.com/dedicated.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Key string `json:"key"`
	// Value of the taint: empty or letters, digits, "-", "_" and ".",
	// starting and ending with a letter or digit.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
	Value string `json:"value,omitempty"`
	// Effect is NoSchedule, PreferNoSchedule or NoExecute.
	// +required
	Effect TaintEffect `json:"effect"`
}

// NodeTemplate is metadata kept on every node of the group. Any key the
// Node API accepts may be used, Deckhouse's documented ones included (the
// node-role.deckhouse.io/<role> labels and the dedicated.deckhouse.io taint
// of its dedicated-node examples), except label and annotation keys under
// node.deckhouse.io/, update.node.deckhouse.io/ and node-manager.deckhouse.io/:
// those are node-manager's own. node.deckhouse.io/group and
// node.deckhouse.io/type say which group a node belongs to (the controllers
// select a group's nodes by them, and a template could move a node into
// another group's updates); the update.node.deckhouse.io/ annotations are
// the update protocol between bashible and the controllers (a template
// approval would approve every update); node-manager.deckhouse.io/
// fencing-enabled tells the fencing controller that the node's watchdog is
// armed, and last-applied-node-template is this template's own record. Taints
// in those key spaces are accepted, with a warning, and not applied.
type NodeTemplate struct {
	// Labels set on every node. Keys under node.deckhouse.io/,
	// update.node.deckhouse.io/ and node-manager.deckhouse.io/, and the key
	// node-restriction.kubernetes.io/deckhouse-node-group, are refused: they
	// are node-manager's own (group membership, node type, the update
	// protocol, fencing).
	// +optional
	// +kubebuilder:validation:MaxProperties=128
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k.startsWith('node.deckhouse.io/') || k.startsWith('update.node.deckhouse.io/') || k.startsWith('node-manager.deckhouse.io/') || k == 'node-restriction.kubernetes.io/deckhouse-node-group'))",message="nodeTemplate.labels: keys under node.deckhouse.io/, update.node.deckhouse.io/ and node-manager.deckhouse.io/, and node-restriction.kubernetes.io/deckhouse-node-group, are reserved for node-manager (group membership, node type, the update protocol, fencing); other keys, such as node-role.deckhouse.io/<role>, may be used",reason=FieldValueForbidden
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations set on every node. Keys under node.deckhouse.io/,
	// update.node.deckhouse.io/ and node-manager.deckhouse.io/ are refused,
	// as for labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=128
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k.startsWith('node.deckhouse.io/') || k.startsWith('update.node.deckhouse.io/') || k.startsWith('node-manager.deckhouse.io/') || k == 'node-restriction.kubernetes.io/deckhouse-node-group'))",message="nodeTemplate.annotations: keys under node.deckhouse.io/, update.node.deckhouse.io/ and node-manager.deckhouse.io/, and node-restriction.kubernetes.io/deckhouse-node-group, are reserved for node-manager (group membership, node type, the update protocol, fencing)",reason=FieldValueForbidden
	Annotations map[string]string `json:"annotations,omitempty"`
	// Taints set on every node, at most one per key and effect (as in
	// Deckhouse; otherwise the later one would silently win). A taint under node.deckhouse.io/,
	// update.node.deckhouse.io/ or node-manager.deckhouse.io/ (such as
	// node.deckhouse.io/uninitialized, which node-manager removes once the
	// template is applied) is accepted, as Deckhouse accepts it, but not
	// applied: kubectl prints a warning, and the group gets a Warning event.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))",message=".spec.nodeTemplate.taints must contain only one taint with the same key and effect",reason=FieldValueInvalid
	Taints []Taint `json:"taints,omitempty"`
}

// ChaosSpec configures the chaos monkey.
type ChaosSpec struct {
	// Mode is Disabled or DrainAndDelete.
	// +optional
	// +kubebuilder:default=Disabled
	// +kubebuilder:validation:Enum=Disabled;DrainAndDelete
	Mode string `json:"mode,omitempty"`
	// Period is the mean time between victims, such as 6h or 90m.
	// +optional
	// +kubebuilder:default="6h"
	// +kubebuilder:validation:Pattern=`^([0-9]+h([0-9]+m)?|[0-9]+m)$`
	Period string `json:"period,omitempty"`
}

// OperatingSystemSpec is kept for compatibility with older manifests.
type OperatingSystemSpec struct {
	// ManageKernel is deprecated and ignored.
	// +optional
	ManageKernel *bool `json:"manageKernel,omitempty"`
}

// StaticInstancesSpec selects StaticInstance machines.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.labelSelector) || (has(self.labelSelector) && self.labelSelector == oldSelf.labelSelector)",message="staticInstances.labelSelector can be added but not changed or removed",fieldPath=".labelSelector",reason=FieldValueForbidden
type StaticInstancesSpec struct {
	// Count is the desired number of static nodes.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count"`
	// LabelSelector selects the StaticInstances that may join the group.
	// +optional
	// +structType=atomic
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// ClassReference points at a cloud provider's instance class.
type ClassReference struct {
	// Kind of the instance class, such as OpenStackInstanceClass.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`
	// Name of the instance class: an object name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
}

// CloudInstancesSpec describes the machines of a CloudEphemeral group.
//
// +kubebuilder:validation:XValidation:rule="self.maxPerZone >= self.minPerZone",message="cloudInstances.maxPerZone must be at least minPerZone",fieldPath=".maxPerZone",reason=FieldValueInvalid
type CloudInstancesSpec struct {
	// ClassReference is the instance class machines are created from.
	// +required
	ClassReference ClassReference `json:"classReference"`
	// Zones to spread machines over; none means every zone of the provider.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Zones []string `json:"zones,omitempty"`
	// MinPerZone is the fewest machines per zone.
	// +required
	// +kubebuilder:validation:Minimum=0
	MinPerZone int32 `json:"minPerZone"`
	// MaxPerZone is the most machines per zone.
	// +required
	// +kubebuilder:validation:Minimum=0
	MaxPerZone int32 `json:"maxPerZone"`
	// MaxUnavailablePerZone is how many machines per zone may be unavailable during an update.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	MaxUnavailablePerZone *int32 `json:"maxUnavailablePerZone,omitempty"`
	// MaxSurgePerZone is how many extra machines per zone may be created during an update.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	MaxSurgePerZone *int32 `json:"maxSurgePerZone,omitempty"`
	// Standby is how many spare machines to keep ready: a number or a percentage.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%?$')",message="cloudInstances.standby must be a number or a percentage",reason=FieldValueInvalid
	Standby *intstr.IntOrString `json:"standby,omitempty"`
	// StandbyHolder tunes how standby capacity is held.
	// +optional
	StandbyHolder *StandbyHolderSpec `json:"standbyHolder,omitempty"`
	// Priority orders groups for the cluster autoscaler's priority expander.
	// +optional
	Priority *int32 `json:"priority,omitempty"`
	// QuickShutdown is deprecated in Deckhouse, where it lowered the drain
	// timeout of the group's machines to 5 minutes. Accepted without
	// effect: node-manager creates no cloud machines, and a drain's
	// deadline is nodeDrainTimeoutSecond (5 minutes when unset).
	// +optional
	QuickShutdown *bool `json:"quickShutdown,omitempty"`
}

// StandbyHolderSpec tunes how standby capacity is held.
type StandbyHolderSpec struct {
	// OverprovisioningRate is the share of a standby machine's capacity held, in percent.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=80
	OverprovisioningRate *int32 `json:"overprovisioningRate,omitempty"`
	// NotHeldResources is deprecated in Deckhouse (no longer used there;
	// overprovisioningRate replaced it). Accepted without effect.
	// +optional
	NotHeldResources *NotHeldResources `json:"notHeldResources,omitempty"`
}

// NotHeldResources is the capacity of a standby machine the standby holder
// left free, as Deckhouse's deprecated field had it.
type NotHeldResources struct {
	// CPU is a number of CPUs or millicores, such as 2 or 1500m.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int || self.matches('^[0-9]+m?$')",message="cloudInstances.standbyHolder.notHeldResources.cpu must be a number of CPUs or millicores, such as 2 or 1500m",reason=FieldValueInvalid
	CPU *intstr.IntOrString `json:"cpu,omitempty"`
	// Memory is a number of bytes, optionally with a suffix, such as
	// 128974848, 1.5Gi or 512M.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int || self.matches('^[0-9]+([.][0-9]+)?(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)?$')",message="cloudInstances.standbyHolder.notHeldResources.memory must be a number of bytes with an optional suffix, such as 128974848, 1.5Gi or 512M",reason=FieldValueInvalid
	Memory *intstr.IntOrString `json:"memory,omitempty"`
}

// Fencing modes (FencingSpec.Mode, and the value of FencingModeLabel).
const (
	// FencingModeWatchdog: the node's watchdog resets it when it is cut off.
	FencingModeWatchdog = "Watchdog"
	// FencingModeNotify: no watchdog; a dead node's pods are freed, its Node kept.
	FencingModeNotify = "Notify"
)

// DefaultWatchdogTimeout is spec.fencing.watchdog.timeout when unset.
const DefaultWatchdogTimeout = "60s"

// FencingSpec enables fencing.
type FencingSpec struct {
	// Mode is Watchdog: the node's softdog resets it when it is cut off
	// from both the API and its group's peers, and its pods are then freed
	// and its Node deleted (a Static or CloudStatic node keeps its Node);
	// or Notify: the same detection with no watchdog armed, its pods freed
	// (but, as nothing reset the node, those with ReadWriteOnce volumes,
	// unless the group opts in with the annotation
	// node-manager.deckhouse.io/fencing-notify-free-readwriteonce=true) and
	// its Node kept.
	// +required
	// +kubebuilder:validation:Enum=Watchdog;Notify
	Mode string `json:"mode"`
	// Watchdog tunes Watchdog mode.
	// +optional
	Watchdog *WatchdogSpec `json:"watchdog,omitempty"`
}

// WatchdogSpec tunes the fencing watchdog.
type WatchdogSpec struct {
	// Timeout after which a node that cannot reach the API is reset, such as 60s.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]*[smh]$`
	Timeout string `json:"timeout,omitempty"`
}

// GPUSharing is how the pods of a GPU node share its GPUs.
// +kubebuilder:validation:Enum=Exclusive;TimeSlicing;MIG
type GPUSharing string

// The GPU sharing modes Deckhouse documents.
const (
	// GPUSharingExclusive gives each pod a whole GPU.
	GPUSharingExclusive GPUSharing = "Exclusive"
	// GPUSharingTimeSlicing lets up to timeSlicing.partitionCount pods
	// share a GPU in turn.
	GPUSharingTimeSlicing GPUSharing = "TimeSlicing"
	// GPUSharingMIG partitions a GPU into hardware instances.
	GPUSharingMIG GPUSharing = "MIG"
)

// GPUSpec is a group's GPU sharing.
type GPUSpec struct {
	// Sharing is Exclusive, TimeSlicing or MIG.
	// +required
	Sharing GPUSharing `json:"sharing"`
	// TimeSlicing tunes TimeSlicing.
	// +optional
	TimeSlicing *GPUTimeSlicing `json:"timeSlicing,omitempty"`
	// MIG tunes MIG.
	// +optional
	MIG *GPUMIG `json:"mig,omitempty"`
	// Exclusive tunes Exclusive; Deckhouse's schema has it as an empty
	// object.
	// +optional
	Exclusive *GPUExclusive `json:"exclusive,omitempty"`
}

// GPUExclusive is Deckhouse's (empty) settings of Exclusive sharing.
type GPUExclusive struct{}

// GPUTimeSlicing tunes time-sliced sharing.
type GPUTimeSlicing struct {
	// PartitionCount is how many pods may share one GPU.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	PartitionCount *int32 `json:"partitionCount,omitempty"`
}

// GPUMIG tunes MIG partitioning.
type GPUMIG struct {
	// PartedConfig is a profile of the MIG manager's mig-parted-config
	// (such as all-1g.5gb), or custom for CustomConfigs.
	// +optional
	// +kubebuilder:validation:MinLength=1
	PartedConfig string `json:"partedConfig,omitempty"`
	// CustomConfigs partition each GPU by its index, with partedConfig custom.
	// +optional
	// +listType=atomic
	CustomConfigs []GPUMIGCustomConfig `json:"customConfigs,omitempty"`
}

// GPUMIGCustomConfig partitions one GPU.
type GPUMIGCustomConfig struct {
	// Index is the GPU's index on the node.
	// +required
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// Slices are the MIG instances to create on it.
	// +required
	// +listType=atomic
	Slices []GPUMIGSlice `json:"slices"`
}

// GPUMIGSlice is a number of MIG instances of one profile.
type GPUMIGSlice struct {
	// Profile is a MIG profile such as 1g.10gb.
	// +required
	// +kubebuilder:validation:MinLength=1
	Profile string `json:"profile"`
	// Count is how many instances of the profile; one when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Count *int32 `json:"count,omitempty"`
}

// NodeGroupStatus is the observed state of a group.
type NodeGroupStatus struct {
	// Nodes is how many Nodes carry the group's label.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// Ready is how many of them are Ready.
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// UpToDate is how many of them report the group's current configuration checksum.
	// +optional
	UpToDate int32 `json:"upToDate,omitempty"`
	// Desired is how many nodes the group wants: staticInstances.count for a
	// Static or CloudStatic group that has staticInstances; for a
	// CloudEphemeral group whose machines node-manager orders through
	// Cluster API, the sum of its MachineDeployments' replicas, never below
	// min. Absent where node-manager cannot know it: another CloudEphemeral
	// group, a CloudPermanent group (its installer's replicas are not
	// visible to node-manager) and a group whose nodes are joined by hand.
	// +optional
	Desired *int32 `json:"desired,omitempty"`
	// Min is minPerZone times the number of zones (CloudEphemeral groups
	// that list their zones, or whose machines node-manager orders, with
	// the provider's zones); absent otherwise.
	// +optional
	Min *int32 `json:"min,omitempty"`
	// Max is maxPerZone times the number of zones, as Min; absent otherwise.
	// +optional
	Max *int32 `json:"max,omitempty"`
	// Instances is how many Instances node-manager keeps for the group: one
	// per node that joined (or was adopted) and per node whose certificate
	// was approved but which has not registered yet.
	// +optional
	Instances *int32 `json:"instances,omitempty"`
	// Standby is how many standby nodes the group holds: the ready pods of
	// its standby holder (CloudEphemeral groups whose machines node-manager
	// orders).
	// +optional
	Standby int32 `json:"standby,omitempty"`
	// LastMachineFailures are the group's machines Cluster API found
	// unhealthy (its MachineHealthCheck: a node lost, or a machine that did
	// not become a node in time), as Deckhouse lists its machine
	// controller's failed machines; each stays listed until it is healthy
	// again or replaced. Only for CloudEphemeral groups whose machines
	// node-manager orders.
	// +optional
	// +listType=atomic
	LastMachineFailures []MachineFailure `json:"lastMachineFailures,omitempty"`
	// Engine is what makes the group's machines, as Deckhouse reports it:
	// CAPI where node-manager runs Cluster API for the group (a Static or
	// CloudStatic group with staticInstances, with --cluster-api; a
	// CloudEphemeral group, with --cloud-cluster too), None
	// where nothing makes machines (they are joined by hand or by the
	// installer). MCM (Deckhouse's machine-controller-manager) is never
	// written here, only accepted.
	// +optional
	// +kubebuilder:validation:Enum=None;MCM;CAPI
	Engine NodeGroupEngine `json:"engine,omitempty"`
	// KubernetesVersion is the Kubernetes version the group's nodes are configured for.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Error is the latest error, empty when there is none.
	// +optional
	Error string `json:"error,omitempty"`
	// Conditions are Ready, Updating, WaitingForDisruptiveApproval, Error,
	// InertFields (fields that are set but have no effect in this deployment),
	// Rendered, and FencingHeld on a group with spec.fencing (True while the
	// fencing controller holds back fencing of its dead nodes, and why).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ConditionSummary is a short form of the conditions for printer columns.
	// +optional
	ConditionSummary *ConditionSummary `json:"conditionSummary,omitempty"`
}

// MachineFailure is a failed machine of a group, in Deckhouse's shape.
type MachineFailure struct {
	// Name is the Machine's name.
	// +optional
	Name string `json:"name,omitempty"`
	// ProviderID is the Machine's providerID.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// OwnerRef is the name of the Machine's owner (its MachineSet).
	// +optional
	OwnerRef string `json:"ownerRef,omitempty"`
	// LastOperation is what failed.
	// +optional
	LastOperation *MachineLastOperation `json:"lastOperation,omitempty"`
}

// MachineLastOperation is the operation of a machine that failed.
type MachineLastOperation struct {
	// Description says what failed.
	// +optional
	Description string `json:"description,omitempty"`
	// LastUpdateTime is when (RFC 3339).
	// +optional
	LastUpdateTime string `json:"lastUpdateTime,omitempty"`
	// State is Failed.
	// +optional
	State string `json:"state,omitempty"`
	// Type is the operation: HealthCheck.
	// +optional
	Type string `json:"type,omitempty"`
}

// ConditionSummary is a short form of a group's conditions.
type ConditionSummary struct {
	// StatusMessage explains what is wrong, empty when nothing is.
	// +optional
	StatusMessage string `json:"statusMessage,omitempty"`
	// Ready is "True" when the group is ready, "False" otherwise.
	// +optional
	Ready string `json:"ready,omitempty"`
}

// NodeGroupList is a list of NodeGroups.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeGroup `json:"items"`
}
