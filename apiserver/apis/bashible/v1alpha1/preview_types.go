package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// NodeGroupBundlePreview asks what a proposed NodeGroup or
// NodeGroupConfiguration would change on nodes, before it is applied. Like
// a SubjectAccessReview it is only created, never stored: the answer is
// its status. Create it with `kubectl create -f preview.yaml -o yaml`.
//
// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=create
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeGroupBundlePreview struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NodeGroupBundlePreviewSpec `json:"spec"`
	// Status is the answer, filled in by the server.
	// +optional
	Status NodeGroupBundlePreviewStatus `json:"status,omitempty"`
}

// NodeGroupBundlePreviewSpec is the proposed change: a NodeGroup
// (deckhouse.io/v1), a NodeGroupConfiguration (deckhouse.io/v1alpha1), or
// one of each, written whole as for `kubectl apply`. Each replaces the
// object of the same name, or is added when there is none.
type NodeGroupBundlePreviewSpec struct {
	// NodeGroup is a proposed NodeGroup.
	// +optional
	NodeGroup *runtime.RawExtension `json:"nodeGroup,omitempty"`
	// NodeGroupConfiguration is a proposed NodeGroupConfiguration.
	// +optional
	NodeGroupConfiguration *runtime.RawExtension `json:"nodeGroupConfiguration,omitempty"`
}

// NodeGroupBundlePreviewStatus says, per group that would change, what its
// nodes would receive. Groups the proposal does not change are not listed.
type NodeGroupBundlePreviewStatus struct {
	// Groups that would change, by name.
	// +optional
	// +listType=atomic
	Groups []GroupPreview `json:"groups,omitempty"`
	// Failures are the groups that would not render, with the template, the
	// line and the message; such a change is never published (a
	// NodeGroupConfiguration that causes one is refused at apply).
	// +optional
	// +listType=atomic
	Failures []GroupRenderFailure `json:"failures,omitempty"`
}

// GroupPreview is what one group's nodes would receive.
type GroupPreview struct {
	// Group is the NodeGroup's name.
	Group string `json:"group"`
	// Checksum is the group's new configuration checksum.
	Checksum string `json:"checksum"`
	// PreviousChecksum is the checksum its nodes receive now, empty for a
	// group not published yet.
	// +optional
	PreviousChecksum string `json:"previousChecksum,omitempty"`
	// Disruptive says a changed step may disrupt workloads (see
	// StepPreview.Disruption); what then happens to a node is the group's
	// ApprovalMode. A group's first bundle never is: a node's first run
	// passes every disruption gate.
	Disruptive bool `json:"disruptive"`
	// ApprovalMode is the group's spec.disruptions.approvalMode.
	ApprovalMode string `json:"approvalMode"`
	// NodeCount is the number of the group's nodes.
	NodeCount int32 `json:"nodeCount"`
	// Nodes are the group's nodes, which would take the change.
	// +optional
	// +listType=atomic
	Nodes []string `json:"nodes,omitempty"`
	// Steps are the changed steps in the order nodes run them; bashible.sh,
	// the agent itself, first when it changes.
	// +optional
	// +listType=atomic
	Steps []StepPreview `json:"steps,omitempty"`
}

// StepChange is how a step changes.
type StepChange string

// How a step changes.
const (
	StepAdded    StepChange = "Added"
	StepModified StepChange = "Modified"
	StepRemoved  StepChange = "Removed"
)

// StepPreview is one changed step.
type StepPreview struct {
	// Name is the step's file name (NNN_<name>.sh, or bashible.sh).
	Name string `json:"name"`
	// Change is Added, Modified or Removed.
	Change StepChange `json:"change"`
	// Disruption says why the change may disrupt the node's workloads (it
	// goes through the disruption gate, asks for a reboot, changes the
	// container runtime or the kernel); empty when it does not.
	// +optional
	// +listType=atomic
	Disruption []string `json:"disruption,omitempty"`
	// Diff is the unified diff (diff -u) of the step's script.
	Diff string `json:"diff"`
}

// GroupRenderFailure is a group that would not render.
type GroupRenderFailure struct {
	// Group is the NodeGroup's name.
	Group string `json:"group"`
	// NodeGroupConfiguration is the configuration at fault, empty when the
	// failure is not a configuration's.
	// +optional
	NodeGroupConfiguration string `json:"nodeGroupConfiguration,omitempty"`
	// Message names the template, the line and what failed.
	Message string `json:"message"`
}
