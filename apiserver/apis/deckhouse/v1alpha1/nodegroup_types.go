package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// NodeGroup at deckhouse.io/v1alpha1: Deckhouse's first NodeGroup
// version, served so that manifests written for it keep applying. It is
// stored at v1 (apiserver/conversion/nodegroup.go converts, and documents
// what v1alpha1 cannot hold). Every field a node's configuration is
// rendered from is validated exactly as at v1: the shared types
// (nodeTemplate, disruptions, chaos, cri.containerd, classReference) are
// v1's own, and the kubelet settings carry v1's markers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=ng,categories=deckhouse
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.nodeType`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="UpToDate",type=integer,JSONPath=`.status.upToDate`
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
	// Status is observed state, as at v1.
	// +optional
	Status deckhousev1.NodeGroupStatus `json:"status,omitempty"`
}

// NodeType is v1alpha1's node type: Cloud (v1's CloudEphemeral), Static, or
// Hybrid (v1's CloudStatic; CloudPermanent also reads as Hybrid).
// +kubebuilder:validation:Enum=Cloud;Static;Hybrid
type NodeType string

// The v1alpha1 node types.
const (
	NodeTypeCloud  NodeType = "Cloud"
	NodeTypeStatic NodeType = "Static"
	NodeTypeHybrid NodeType = "Hybrid"
)

// NodeGroupSpec is the v1alpha1 desired configuration of a group.
//
// +kubebuilder:validation:XValidation:rule="self.nodeType != 'Cloud' || has(self.cloudInstances)",message="cloudInstances is required when nodeType is Cloud",fieldPath=".cloudInstances",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.nodeType == 'Cloud' || !has(self.cloudInstances)",message="cloudInstances is allowed only when nodeType is Cloud",fieldPath=".cloudInstances",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.disruptions) || !has(self.disruptions.approvalMode) || self.disruptions.approvalMode != 'RollingUpdate' || self.nodeType == 'Cloud'",message="it is forbidden to set .spec.disruptions.approvalMode to \"RollingUpdate\" when spec.nodeType is not \"Cloud\"",fieldPath=".disruptions.approvalMode",reason=FieldValueForbidden
type NodeGroupSpec struct {
	// NodeType is Cloud, Static or Hybrid; it cannot be changed once set.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message=".spec.nodeType field is immutable",reason=FieldValueForbidden
	NodeType NodeType `json:"nodeType"`

	// KubernetesVersion was the group's Kubernetes minor. It has no effect
	// (v1's spec.kubernetesVersion does, and is not set from it); Deckhouse
	// drops it converting to v1, node-manager keeps it aside and reads it
	// back at v1alpha1 as written.
	// +optional
	// +kubebuilder:validation:Pattern=`^1\.[0-9]{1,3}$`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// CRI configures the container runtime.
	// +optional
	CRI *CRISpec `json:"cri,omitempty"`

	// Docker is the deprecated Docker settings (v1's cri.docker); without
	// cri.type it makes cri.type Docker at v1, as in Deckhouse.
	// +optional
	Docker *deckhousev1.DockerSpec `json:"docker,omitempty"`

	// Kubelet configures the kubelet.
	// +optional
	Kubelet *KubeletSpec `json:"kubelet,omitempty"`

	// Disruptions says how disruptive updates are approved.
	// +optional
	// +kubebuilder:default={approvalMode: Automatic}
	Disruptions *deckhousev1.DisruptionsSpec `json:"disruptions,omitempty"`

	// NodeTemplate holds labels, annotations and taints kept on every node
	// of the group, validated as at v1.
	// +optional
	NodeTemplate *deckhousev1.NodeTemplate `json:"nodeTemplate,omitempty"`

	// Chaos configures the chaos monkey.
	// +optional
	Chaos *deckhousev1.ChaosSpec `json:"chaos,omitempty"`

	// OperatingSystem is kept for compatibility; it has no effect.
	// +optional
	OperatingSystem *deckhousev1.OperatingSystemSpec `json:"operatingSystem,omitempty"`

	// CloudInstances describes the machines of a Cloud group.
	// +optional
	CloudInstances *CloudInstancesSpec `json:"cloudInstances,omitempty"`

	// Static held the subnets of static nodes. It has no effect (the
	// cluster's StaticClusterConfiguration holds them); Deckhouse drops it
	// converting to v1, node-manager keeps it aside and reads it back at
	// v1alpha1 as written.
	// +optional
	Static *StaticSpec `json:"static,omitempty"`
}

// CRIType is v1alpha1's container runtime type.
// +kubebuilder:validation:Enum=Docker;Containerd;NotManaged
type CRIType string

// CRISpec configures the container runtime.
//
// +kubebuilder:validation:XValidation:rule="!has(self.containerd) || (has(self.type) && self.type == 'Containerd')",message="cri.containerd is allowed only when cri.type is Containerd",fieldPath=".containerd",reason=FieldValueForbidden
type CRISpec struct {
	// Type is Docker (deprecated, no effect), Containerd or NotManaged.
	// +optional
	Type CRIType `json:"type,omitempty"`
	// Containerd tunes containerd when type is Containerd.
	// +optional
	Containerd *deckhousev1.ContainerdSpec `json:"containerd,omitempty"`
}

// KubeletSpec configures the kubelet: v1alpha1's fields, with v1's
// validation.
type KubeletSpec struct {
	// MaxPods is the most pods the kubelet runs.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxPods *int32 `json:"maxPods,omitempty"`
	// RootDir is the kubelet's data directory, as at v1.
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
}

// CloudInstancesSpec describes the machines of a Cloud group.
//
// +kubebuilder:validation:XValidation:rule="self.maxPerZone >= self.minPerZone",message="cloudInstances.maxPerZone must be at least minPerZone",fieldPath=".maxPerZone",reason=FieldValueInvalid
type CloudInstancesSpec struct {
	// ClassReference is the instance class machines are created from.
	// +required
	ClassReference deckhousev1.ClassReference `json:"classReference"`
	// Zones to spread machines over.
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
}

// StandbyHolderSpec is v1alpha1's standby holder: only the deprecated
// notHeldResources.
type StandbyHolderSpec struct {
	// NotHeldResources is deprecated and has no effect.
	// +optional
	NotHeldResources *deckhousev1.NotHeldResources `json:"notHeldResources,omitempty"`
}

// StaticSpec is v1alpha1's static node settings.
type StaticSpec struct {
	// InternalNetworkCIDRs were the nodes' internal subnets.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	InternalNetworkCIDRs []string `json:"internalNetworkCIDRs,omitempty"`
}

// NodeGroupList is a list of NodeGroups.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeGroup `json:"items"`
}
