package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Instance is one machine of a node group as node-manager sees it: which
// Node it became, which machine backs it, and how its bashible runs are
// going. It has no spec; controllers and the node's bashible write its status.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:storageversion
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,categories=deckhouse
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.currentStatus.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeRef.name`
// +kubebuilder:printcolumn:name="Bashible",type=string,JSONPath=`.status.bashibleStatus`
// +kubebuilder:printcolumn:name="Failed Step",type=string,JSONPath=`.status.lastRun.failedStep`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Instance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is the machine's observed state.
	// +optional
	Status InstanceStatus `json:"status,omitempty"`
}

// InstancePhase is where a machine is in its life.
// +kubebuilder:validation:Enum=Pending;Provisioning;Provisioned;Running;Terminating
type InstancePhase string

const (
	// InstancePending is a machine that is waiting to be created.
	InstancePending InstancePhase = "Pending"
	// InstanceProvisioning is a machine being created.
	InstanceProvisioning InstancePhase = "Provisioning"
	// InstanceProvisioned is a machine that exists but whose node has not joined.
	InstanceProvisioned InstancePhase = "Provisioned"
	// InstanceRunning is a machine whose node has joined.
	InstanceRunning InstancePhase = "Running"
	// InstanceTerminating is a machine being removed.
	InstanceTerminating InstancePhase = "Terminating"
)

// BashibleStatus summarises the node's bashible runs.
// +kubebuilder:validation:Enum=Ready;WaitingApproval;WaitingDisruptionApproval;Error;Unknown
type BashibleStatus string

// InstanceStatus is a machine's observed state.
type InstanceStatus struct {
	// NodeRef names the Node the machine became.
	// +optional
	NodeRef *NodeRef `json:"nodeRef,omitempty"`
	// ClassReference is the instance class of a cloud machine.
	// +optional
	ClassReference *InstanceClassReference `json:"classReference,omitempty"`
	// MachineRef is the machine controller's object backing this instance.
	// +optional
	MachineRef *MachineRef `json:"machineRef,omitempty"`
	// CurrentStatus is the phase and when it last changed.
	// +optional
	CurrentStatus *CurrentStatus `json:"currentStatus,omitempty"`
	// LastOperation is the machine controller's latest operation.
	// +optional
	LastOperation *LastOperation `json:"lastOperation,omitempty"`
	// BootstrapStatus tells where to read a joining machine's bootstrap logs.
	// +optional
	BootstrapStatus *BootstrapStatus `json:"bootstrapStatus,omitempty"`
	// BashibleStatus is Ready, WaitingApproval, WaitingDisruptionApproval, Error or Unknown.
	// +optional
	BashibleStatus BashibleStatus `json:"bashibleStatus,omitempty"`
	// Message explains the bashible status.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// Conditions: BashibleReady, WaitingApproval, WaitingDisruptionApproval.
	// Bounded (16 conditions, each message at most 1024 bytes, as
	// bashible's are): a node writes them.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(c, size(c.message) <= 1024)",message="a condition's message is at most 1024 bytes"
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastRun is, step by step, bashible's latest run that ran steps
	// (runs that find the node in sync run none and leave it alone). The
	// node writes it at the end of the run, under its own field manager.
	// +optional
	LastRun *BashibleRun `json:"lastRun,omitempty"`
	// LastFailure is bashible's latest failed run; it stays when later
	// runs succeed, so the last failure can be read after it is fixed.
	// +optional
	LastFailure *BashibleRun `json:"lastFailure,omitempty"`
}

// BashibleRunResult is how a bashible run ended.
// +kubebuilder:validation:Enum=Succeeded;Failed;Stopped
type BashibleRunResult string

const (
	// BashibleRunSucceeded: every step succeeded.
	BashibleRunSucceeded BashibleRunResult = "Succeeded"
	// BashibleRunFailed: a step failed its last attempt; the run ended there.
	BashibleRunFailed BashibleRunResult = "Failed"
	// BashibleRunStopped: a step stopped the run (the node waits to be
	// replaced, approvalMode RollingUpdate); its configuration is not applied.
	BashibleRunStopped BashibleRunResult = "Stopped"
)

// MaxReportedSteps is how many steps a BashibleRun lists: a run that ran
// more lists its last MaxReportedSteps (the failed step, if any, is the
// last one) and counts the others in OmittedSteps.
const MaxReportedSteps = 128

// BashibleRun is one bashible run as the node reports it: the steps it
// ran, in order, with their attempts, durations and exit statuses. Its
// size is bounded: at most MaxReportedSteps steps of at most 253-byte
// names, and a message of at most 1024 characters.
type BashibleRun struct {
	// Checksum is the configuration the run converged to.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// StartTime is when the first step started.
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when the last step ended.
	CompletionTime metav1.Time `json:"completionTime"`
	// Result is Succeeded, Failed or Stopped.
	Result BashibleRunResult `json:"result"`
	// FailedStep names the step whose last attempt failed (Failed runs only).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	FailedStep string `json:"failedStep,omitempty"`
	// Message says how the failed step failed, with the last lines of its
	// output (trace lines left out), truncated.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// Steps are the steps the run ran, in order: the last 128
	// (MaxReportedSteps) of them.
	// +kubebuilder:validation:MaxItems=128
	// +listType=atomic
	// +optional
	Steps []BashibleStep `json:"steps,omitempty"`
	// OmittedSteps counts the steps the run ran before those listed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OmittedSteps int32 `json:"omittedSteps,omitempty"`
}

// BashibleStep is one step of a bashible run.
type BashibleStep struct {
	// Name is the step's name in the bundle (NNN_name.sh).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Attempts is how many times the step ran in this run (failed
	// attempts are retried up to bashible's --max-retries).
	// +kubebuilder:validation:Minimum=1
	Attempts int32 `json:"attempts"`
	// DurationMilliseconds is the wall time from the step's first attempt
	// to the end of its last, the delays between attempts included.
	// +kubebuilder:validation:Minimum=0
	DurationMilliseconds int64 `json:"durationMilliseconds"`
	// ExitCode is the exit status of the last attempt: 0 when the step
	// succeeded, 124 or 137 when it was killed after its timeout.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	ExitCode int32 `json:"exitCode"`
}

// NodeRef names a Node.
type NodeRef struct {
	// Name of the Node.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// InstanceClassReference points at a cloud provider's instance class.
type InstanceClassReference struct {
	// Kind of the instance class.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Kind string `json:"kind,omitempty"`
	// Name of the instance class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// MachineRef points at a machine controller's object.
type MachineRef struct {
	// APIVersion of the machine object.
	// +kubebuilder:validation:MaxLength=317
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// Kind of the machine object.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Kind string `json:"kind,omitempty"`
	// Name of the machine object.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
	// Namespace of the machine object.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// CurrentStatus is a machine's phase.
type CurrentStatus struct {
	// Phase is Pending, Provisioning, Provisioned, Running or Terminating.
	// +optional
	Phase InstancePhase `json:"phase,omitempty"`
	// LastUpdateTime is when the phase last changed.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
}

// LastOperation is a machine controller's latest operation.
type LastOperation struct {
	// Description of the operation.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// LastUpdateTime is when the operation last changed.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
	// State of the operation, such as Processing, Failed or Successful.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	State string `json:"state,omitempty"`
	// Type of the operation, such as Create or Delete.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Type string `json:"type,omitempty"`
}

// MaxInstanceDescription is the longest description an Instance's status
// holds (lastOperation, bootstrapStatus); the schema refuses longer ones.
const MaxInstanceDescription = 1024

// BootstrapStatus tells where to read a joining machine's bootstrap logs.
type BootstrapStatus struct {
	// LogsEndpoint is an address serving the bootstrap logs.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	LogsEndpoint string `json:"logsEndpoint,omitempty"`
	// Description says how to read them.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
}

// InstanceList is a list of Instances.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type InstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Instance `json:"items"`
}
