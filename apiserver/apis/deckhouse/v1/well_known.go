package v1

// The wire names of node-manager: the labels, annotations, taints, field
// managers, namespaces and object names that nodes, users and other
// components read or write. They are fixed (docs/development/architecture.md,
// "Fixed names": real Deckhouse nodes and users already speak most of them),
// so each is written here once and every other package uses the constant.
// hack/verify-wire-names.sh (run by `make lint`) fails when one of these
// values appears as a string literal anywhere else; names of the aggregated
// API (bashible.deckhouse.io) are in
// apiserver/apis/bashible/v1alpha1/well_known.go.
//
// Each value is written out in full, never built from another constant, so
// that a reader (and the lint) sees the exact string, and no two constants
// share a value.

// Labels on Nodes, Instances and served objects.
const (
	// NodeGroupLabel names the NodeGroup a node belongs to. bashible sets it
	// on the Node at registration (the kubelet's --node-labels), and
	// node-manager-controller writes it on the node's Instance when it
	// approves the kubelet's first certificate. bashible-apiserver and the
	// controllers trust only the Instance's label: a node may relabel its
	// own Node (NodeGroupRestrictedLabel is the Node label it cannot
	// write). bashible-apiserver also puts it on every served object and
	// published bundle Secret.
	NodeGroupLabel = "node.deckhouse.io/group"

	// NodeGroupRestrictedLabel names, like NodeGroupLabel, the NodeGroup a
	// node belongs to, under the node-restriction.kubernetes.io/ prefix,
	// which the NodeRestriction admission plugin forbids a kubelet to set,
	// change or remove on its own Node (on create too). Only
	// node-manager-controller writes it (the node template controller, from
	// the node's Instance, correcting any other value), so it is the group
	// label a DaemonSet's nodeSelector, or anything else that cannot ask the
	// Instance, may trust: the fencing agents' DaemonSets select their
	// group's nodes by it, and the agents list their group's members by it.
	// NodeGroup templates may not set it.
	NodeGroupRestrictedLabel = "node-restriction.kubernetes.io/deckhouse-node-group"

	// NodeTypeLabel is the node's group's spec.nodeType (Static,
	// CloudStatic, CloudPermanent, CloudEphemeral). Set like NodeGroupLabel
	// at registration and kept by the node template controller; also on
	// every served object.
	NodeTypeLabel = "node.deckhouse.io/type"

	// NodeRoleLabelPrefix + <group> is the Kubernetes role label the node
	// template controller puts on every node of a group (kubectl get nodes
	// shows it in ROLES).
	NodeRoleLabelPrefix = "node-role.kubernetes.io/"

	// ControlPlaneRoleLabel is the role label the node template controller
	// enforces on the nodes of MasterNodeGroup, as kubeadm does. It is also
	// the key of the control-plane taint (effect NoSchedule) that
	// MasterNodeGroup's nodeTemplate is expected to carry: without it
	// d8_nodegroup_taint_missing{name="master"} is 1 and the alert
	// NodeGroupMasterTaintIsAbsent fires, as in Deckhouse.
	ControlPlaneRoleLabel = "node-role.kubernetes.io/control-plane"

	// ManagedByLabel is Kubernetes' recommended label; node-manager-
	// controller sets it to NodeManagerControllerName on the Instances it
	// makes (and deletes only those) and on configuration-checksums.
	ManagedByLabel = "app.kubernetes.io/managed-by"

	// AppNameLabel is Kubernetes' recommended label: node-manager-controller
	// sets it to FencingAgentName on the fencing agents' DaemonSets and
	// their pods (with NodeGroupLabel, it is their selector), and watches
	// only DaemonSets that carry it.
	AppNameLabel = "app.kubernetes.io/name"

	// FencingEnabledLabel is Deckhouse's fencing protocol, for the fencing
	// agent and fencing controller (agents/): the agent sets it on its Node
	// while it holds the node's watchdog armed and removes it before it
	// disarms; the controller watches only Nodes that carry it.
	FencingEnabledLabel = "node-manager.deckhouse.io/fencing-enabled"
	// FencingModeLabel is Deckhouse's too: the fencing agent sets it on its
	// Node to its group's mode (FencingModeWatchdog or FencingModeNotify);
	// the fencing controller keeps the Node of a Notify node.
	FencingModeLabel = "node-manager.deckhouse.io/fencing-mode"

	// BashibleEventNodeLabel is on every Event bashible creates about its
	// node (bb-event in templates/tree/lib/_node_lib.tpl: BashibleConverged,
	// BashibleStepFailed, BashibleUpdateRefused, ...), with the node's name
	// as its value, so `kubectl get events -l` selects one node's bashible
	// Events; nothing in node-manager selects by it.
	BashibleEventNodeLabel = "bashible.deckhouse.io/node"
)

// What a node reports about itself, as Deckhouse's bashible does: bashible
// labels (and annotates) its own Node at the end of every converging run
// (bb-node-capabilities in templates/tree/lib/_node_lib.tpl), and
// bashible-apiserver's NodeGroup policy (apiserver/admission) refuses the
// changes of a group its nodes cannot take. A node writes these on its own
// Node, so a node could forge them only to block its own group's change.
const (
	// ContainerdConfigLabel is "custom" when /etc/containerd/conf.d holds
	// .toml files (a user's containerd configuration, merged into
	// node-manager's), "default" when it holds none; set only on nodes of a
	// group whose runtime is Containerd, removed otherwise. A group's
	// cri.type cannot change while one of its nodes is "custom".
	ContainerdConfigLabel       = "node.deckhouse.io/containerd-config"
	ContainerdConfigCustomValue = "custom"
	// ContainerdConfigDefaultValue is the label's value without user files.
	ContainerdConfigDefaultValue = "default"
	// ContainerdV2UnsupportedLabel (value "") is on a node that cannot run
	// containerd 2: a kernel before 5.8, systemd before 244 (or none),
	// no cgroup v2, or no EROFS filesystem. A group cannot switch to
	// ContainerdV2 while one of its nodes has it.
	ContainerdV2UnsupportedLabel = "node.deckhouse.io/containerd-v2-unsupported"
	// ContainerdV2ErrorAnnotation lists, as a JSON array, which of
	// "kernel", "systemd", "cgroupv2" and "erofs" the node lacks; absent
	// when it lacks none.
	ContainerdV2ErrorAnnotation = "node.deckhouse.io/containerd-v2-err"
	// CgroupLabel is the file system type of the node's /sys/fs/cgroup:
	// CgroupV2Value (cgroup v2), "tmpfs" (cgroup v1) or "unknown". A group
	// cannot turn on LimitedSwap while one of its nodes reports another
	// value than CgroupV2Value.
	CgroupLabel   = "node.deckhouse.io/cgroup"
	CgroupV2Value = "cgroup2fs"
)

// Domains of node-manager's own label, annotation and taint keys (with
// UpdateAnnotationPrefix). The node template controller never applies user
// template keys inside them: such a key would fight bashible, update
// approval or the controller itself. The NodeGroup CRD refuses such
// template labels and annotations (NodeTemplate's rules repeat these
// values, since a CEL rule cannot name a constant), and the policy
// manifests/policies/nodegroup-template-keys.yaml warns about such taints;
// TestReservedKeysAgreeWithTheCRDAndTheWarningPolicy keeps the three equal.
const (
	NodeDomain        = "node.deckhouse.io/"
	NodeManagerDomain = "node-manager.deckhouse.io/"
)

// Annotations on a Node: the update protocol between bashible on the node
// and node-manager-controller. The node asks, the controller approves; once
// the node reports the new checksum, update approval removes the update
// annotations in one patch.
const (
	// ConfigurationChecksumAnnotation is the configuration checksum bashible
	// last applied on the node, written by bashible after a successful run.
	// The controllers compare it with the group's served checksum
	// (bashible.deckhouse.io/configuration-checksum) to tell up-to-date nodes.
	ConfigurationChecksumAnnotation = "node.deckhouse.io/configuration-checksum"

	// UpdateAnnotationPrefix starts every annotation of the update protocol;
	// a node with any of them (Reboot aside) is somewhere in an update.
	UpdateAnnotationPrefix = "update.node.deckhouse.io/"

	// WaitingForApprovalAnnotation is set by bashible when the served
	// checksum differs from the node's; it then waits.
	WaitingForApprovalAnnotation = "update.node.deckhouse.io/waiting-for-approval"
	// ApprovedAnnotation is set by node-manager-controller (update approval)
	// to let a waiting node apply the new configuration.
	ApprovedAnnotation = "update.node.deckhouse.io/approved"
	// DisruptionRequiredAnnotation is set by bashible when a step of the new
	// configuration would disrupt the node's workloads (a kubelet or
	// containerd restart); it then waits for DisruptionApprovedAnnotation.
	DisruptionRequiredAnnotation = "update.node.deckhouse.io/disruption-required"
	// DisruptionApprovedAnnotation is set by node-manager-controller (after
	// draining, as the group's disruptions say) or by a person (approvalMode
	// Manual) to let bashible run the disruptive steps.
	DisruptionApprovedAnnotation = "update.node.deckhouse.io/disruption-approved"
	// DrainingAnnotation asks the drain controller to drain the node. Its
	// value says who asked: DrainSourceBashible (or empty) for an update,
	// anything else for a person or another tool.
	DrainingAnnotation = "update.node.deckhouse.io/draining"
	// DrainedAnnotation is set by the drain controller when a drain
	// finished; it keeps the value of DrainingAnnotation.
	DrainedAnnotation = "update.node.deckhouse.io/drained"
	// DrainFailedAnnotation is set by the drain controller, with the reason,
	// while a drain attempt fails (the drain is retried).
	DrainFailedAnnotation = "update.node.deckhouse.io/drain-failed"
	// ForeignCordonAnnotation is update approval's note, written with
	// DrainingAnnotation, that the node was already cordoned (by a person
	// or another tool) when node-manager asked to drain it: after the
	// update the node is left cordoned, and the note removed.
	ForeignCordonAnnotation = "update.node.deckhouse.io/foreign-cordon"
	// RollingUpdateAnnotation is set by update approval on a node of a
	// group whose disruptions say RollingUpdate: a Cluster API machine
	// controller replaces the node instead of updating it in place.
	RollingUpdateAnnotation = "update.node.deckhouse.io/rolling-update"
	// ReplacementReportedAnnotation is update approval's note that it has
	// warned, once per update, about a RollingUpdate node that no machine
	// controller will replace.
	ReplacementReportedAnnotation = "update.node.deckhouse.io/replacement-reported"
	// RebootAnnotation is set by a person to have bashible reboot the node
	// (through the same approval and disruption steps); bashible removes it
	// once the node has rebooted for it.
	RebootAnnotation = "update.node.deckhouse.io/reboot"

	// DrainSourceBashible is the value of DrainingAnnotation and
	// DrainedAnnotation when node-manager asked for the drain on behalf of
	// an update; such a node is also uncordoned by node-manager afterwards.
	DrainSourceBashible = "bashible"

	// LastAppliedNodeTemplateAnnotation holds the JSON of what the node
	// template controller applied last (Deckhouse's name and format:
	// {"annotations":{},"labels":{},"taints":[]}), so it removes only what it
	// set itself.
	LastAppliedNodeTemplateAnnotation = "node-manager.deckhouse.io/last-applied-node-template"

	// FencingDisableAnnotation is Deckhouse's fencing protocol too: a person
	// sets it to keep the fencing agent disarmed on a node (maintenance),
	// and the fencing controller never fences a node that carries it,
	// ApprovedAnnotation or DisruptionApprovedAnnotation.
	FencingDisableAnnotation = "node-manager.deckhouse.io/fencing-disable"
	// FencingNotifyFreeReadWriteOnceAnnotation, set to "true" on a NodeGroup
	// fenced in Notify mode, lets the fencing controller free the pods of a
	// dead node that use ReadWriteOnce (or ReadWriteOncePod) volumes too.
	// Nothing resets a Notify node, so such a pod may still run there, and
	// freeing it runs it twice (a StatefulSet's pod on two nodes, two
	// writers on one disk): without the annotation those pods stay, and
	// the group's author is warned at apply when it is set
	// (manifests/policies/nodegroup-fencing-notify.yaml).
	FencingNotifyFreeReadWriteOnceAnnotation = "node-manager.deckhouse.io/fencing-notify-free-readwriteonce"
	// PinAcrossClusterSettingsAnnotation, on a NodeGroup, set to the
	// revision of spec.update.pinnedRevision, lets bashible-apiserver serve
	// that revision though it was rendered under other cluster settings
	// than the current ones (an extra CA, registry credentials or a proxy
	// removed since), which it otherwise refuses (condition Pinned=False,
	// ClusterSettingsChanged). Only a user allowed the verb
	// PinAcrossClusterSettingsVerb on the NodeGroup may set or change it
	// (manifests/policies/nodegroup-pin-across-cluster-settings.yaml).
	PinAcrossClusterSettingsAnnotation = "node-manager.deckhouse.io/allow-pin-across-cluster-settings"

	// FencedAnnotation is set by the fencing controller on a fenced Node it
	// keeps (a Static or CloudStatic node, or one in Notify mode) to the
	// spec.renewTime (RFC 3339, microseconds) of the node's Lease when it was
	// fenced, so that the node is fenced once, not on every look. The
	// controller reads it back and removes it once the Lease has been
	// renewed since (the node is back).
	FencedAnnotation = "node-manager.deckhouse.io/fenced"

	// ResumeRolloutAnnotation (any value), set by a person on a NodeGroup
	// whose rollout halted (condition RolloutHalted), lets the rollout go
	// on as if the failure that halted it had not happened; update approval
	// removes it once read. A new configuration resumes a rollout too.
	ResumeRolloutAnnotation = "update.node.deckhouse.io/resume-rollout"
	// RolloutStateAnnotation on a NodeGroup with canaries or a soak time
	// (spec.update) is update approval's record of the rollout in progress
	// (JSON: the checksum, the current batch, the canaries done, when the
	// batch's soak ends, the halt), kept in the cluster so that a
	// restarted or new leader carries on where the last one stopped.
	RolloutStateAnnotation = "node-manager.deckhouse.io/rollout"

	// ApprovedRequestAnnotation on an Instance is the kubelet client
	// certificate request node-manager approved for the node's name (JSON:
	// the CSR's name, the bootstrap token's id, the sha256 fingerprint of
	// the request's public key). While it is there, node-manager approves
	// no request for the name with another key: the name is claimed until
	// the node registers (then no token may ask for it at all) or a person
	// removes the annotation (or the Instance).
	ApprovedRequestAnnotation = "node-manager.deckhouse.io/approved-request"
)

// Annotations of other components that node-manager reads or writes.
const (
	// ScaleDownDisabledAnnotation is cluster-autoscaler's: the node template
	// controller sets it on nodes of groups that cluster-autoscaler did not
	// create, so the autoscaler never removes them.
	ScaleDownDisabledAnnotation = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
	// MachineAnnotation is Cluster API's, on nodes whose machine a Cluster
	// API controller manages: such nodes get the full node template even in
	// CloudEphemeral groups, and update approval leaves their replacement
	// (RollingUpdateAnnotation) to that controller.
	MachineAnnotation = "cluster.x-k8s.io/machine"
	// AutoscalerCapacityPrefix starts the cluster-autoscaler's Cluster API
	// provider's annotations of what a node of a MachineDeployment will
	// have, read to scale it from zero (kubernetes/autoscaler,
	// cluster-autoscaler/cloudprovider/clusterapi/clusterapi_utils.go):
	// <prefix>cpu, memory, ephemeral-disk, gpu-type, gpu-count, maxPods,
	// labels ("k1=v1,k2=v2") and taints ("k1=v1:NoSchedule,k2:NoExecute").
	// A class's own annotations under it are copied to the group's
	// MachineDeployments; labels, taints and maxPods are the group's.
	AutoscalerCapacityPrefix = "capacity.cluster-autoscaler.kubernetes.io/"
	// AutoscalerPriorityExpanderConfigMap is the ConfigMap the autoscaler's
	// priority expander reads (--expander=priority), in its own namespace;
	// node-manager writes it from the CloudEphemeral groups' priority
	// into the namespace of its MachineDeployments, where the release runs
	// the autoscaler. Its key AutoscalerPrioritiesKey holds a YAML map of
	// priority to the regular expressions of node group names.
	AutoscalerPriorityExpanderConfigMap = "cluster-autoscaler-priority-expander"
	AutoscalerPrioritiesKey             = "priorities"
)

// Taints.
const (
	// UninitializedTaint (effect NoSchedule) is registered with the node by
	// the kubelet flags bashible writes (--register-with-taints), and removed
	// by the node template controller once it has applied the group's node
	// template, so no pod lands on a node before its labels and taints are
	// in place.
	UninitializedTaint = "node.deckhouse.io/uninitialized"
)

// The components' names. Each is the field manager of everything the
// component writes, its leader Lease, and the source of its Events.
const (
	// BashibleAPIServerName is bashible-apiserver's name: its field manager,
	// its leader Lease in BundlesNamespace, its Event source and
	// ServiceAccount, and the value of PublishedBundleAppLabel.
	BashibleAPIServerName = "bashible-apiserver"
	// BashibleRenderWorkerName is the binary bashible-apiserver runs its
	// render workers from, shipped beside it in its image.
	BashibleRenderWorkerName = "bashible-render-worker"
	// NodeManagerControllerName is node-manager-controller's name: its field
	// manager, its leader Lease in Namespace, its Event source.
	NodeManagerControllerName = "node-manager-controller"
	// FencingAgentName is the fencing agent's name: its field manager on its
	// own Node, its Event source, its ServiceAccount, and the prefix of its
	// DaemonSets (fencing-agent-<group>) in Namespace.
	FencingAgentName = "fencing-agent"
	// EarlyOOMName is the early-oom agent's name (agents/early-oom): its
	// DaemonSet, ServiceAccount and Event source in Namespace, and the name
	// of its settings ConfigMap there (EarlyOOMSettingsKey).
	EarlyOOMName = "early-oom"
	// FencingControllerFieldManager is the field manager of the NodeGroup
	// status conditions the fencing controller (controllers/fencing, inside
	// node-manager-controller) applies. It differs from
	// NodeManagerControllerName because the nodegroup-status controller
	// applies the rest of the status with server-side apply and Force: with
	// one manager, each apply would remove the other's conditions.
	FencingControllerFieldManager = "node-manager-controller-fencing"
	// ApprovalControllerFieldManager is the field manager of the NodeGroup
	// status condition RolloutHalted that update approval
	// (controllers/approval) applies, for the same reason.
	ApprovalControllerFieldManager = "node-manager-controller-approval"

	// BashibleLastRunFieldManager and BashibleLastFailureFieldManager are
	// the field managers under which bashible, as its node, applies its
	// Instance's status.lastRun and status.lastFailure (the step history;
	// templates/tree/bashible.sh.tpl). One manager each, and none shared
	// with the conditions bashible sets (bashible-<condition type>), so
	// applying one never removes another.
	BashibleLastRunFieldManager     = "bashible-last-run"
	BashibleLastFailureFieldManager = "bashible-last-failure"
)

// Namespaces.
const (
	// Namespace holds what node-manager-controller writes for users and
	// tools (manual-bootstrap Secrets, configuration-checksums), its leader
	// Lease, and the bashible-api Service the APIService points at.
	Namespace = "d8-cloud-instance-manager"
	// BundlesNamespace holds the bundles bashible-apiserver publishes and
	// its leader Lease; only bashible-apiserver's ServiceAccount may write
	// there, since whoever can writes what nodes run as root.
	BundlesNamespace = "d8-bashible-bundles"
)

// Objects node-manager reads, by name.
const (
	// NodeNameTombstonesConfigMap (in Namespace) remembers, for a day, the
	// group of each node whose Instance node-manager deleted because its
	// Node was gone (removed, or fenced): until then, only a bootstrap
	// token of that group may obtain a certificate under the name. A
	// person may remove a name's key to release it sooner.
	NodeNameTombstonesConfigMap = "node-name-tombstones"

	// ClusterConfigurationSecret (kube-system) holds the cluster-wide
	// settings under ClusterConfigurationKey (kind ClusterConfiguration,
	// written by the cluster's installer); bashible-apiserver renders from
	// it, with documented defaults when it is absent.
	ClusterConfigurationSecret = "d8-cluster-configuration"
	ClusterConfigurationKey    = "cluster-configuration.yaml"

	// StaticClusterConfigurationSecret (kube-system) holds Deckhouse's
	// StaticClusterConfiguration under StaticClusterConfigurationKey:
	// internalNetworkCIDRs, the networks whose address the kubelet of a
	// Static node registers with. Optional, as in Deckhouse.
	StaticClusterConfigurationSecret = "d8-static-cluster-configuration"
	StaticClusterConfigurationKey    = "static-cluster-configuration.yaml"

	// RootCAConfigMap (kube-system, key ca.crt) is the cluster CA that
	// kube-controller-manager publishes in every namespace; it goes into
	// bundles and manual-bootstrap scripts so a joining node trusts the API.
	RootCAConfigMap = "kube-root-ca.crt"

	// MasterNodeGroup is the NodeGroup of control-plane nodes: its nodes get
	// ControlPlaneRoleLabel.
	MasterNodeGroup = "master"
)

// Objects node-manager-controller writes in Namespace for users and tools.
const (
	// ConfigurationChecksumsSecret maps every group to its configuration
	// checksum (<group>: <sha256>), for tools that read it the way they read
	// Deckhouse's.
	ConfigurationChecksumsSecret = "configuration-checksums"

	// ManualBootstrapSecretPrefix + <group> is the Secret a person reads to
	// join a machine by hand (Static and CloudStatic groups). Its data keys
	// follow; its annotations name the token inside.
	ManualBootstrapSecretPrefix = "manual-bootstrap-for-"
	// ManualBootstrapScriptKey is the script to run on the machine.
	ManualBootstrapScriptKey = "bootstrap.sh"
	// ManualBootstrapCloudConfigKey is the same script as cloud-init user
	// data, under the name of its format (which a bootstrap-data Secret
	// gives as its infrastructurev1alpha1.BootstrapDataFormatKey).
	ManualBootstrapCloudConfigKey = "cloud-config"
	// ManualBootstrapEndpointsKey lists the API servers (YAML) the script tries.
	ManualBootstrapEndpointsKey = "apiserverEndpoints"
	// BootstrapDataSecretPrefix + <group> is a CloudEphemeral group's
	// bootstrap data, in the form Cluster API's infrastructure providers
	// read (a Machine's spec.bootstrap.dataSecretName): the manual-bootstrap
	// script as cloud-init user data and its format, cloud-config, under
	// the keys of the infrastructure API's ClusterSecretValueKey and
	// BootstrapDataFormatKey. Rewritten with each new token.
	BootstrapDataSecretPrefix = "bootstrap-data-for-"
	// ChaosLastVictimAnnotation is on a NodeGroup with chaos.mode
	// DrainAndDelete: when (RFC 3339) node-manager last deleted one of its
	// machines, or started counting the period; the next victim is due a
	// period later. Written by node-manager-controller, which also keeps
	// its last mark in memory (the later of the two counts).
	ChaosLastVictimAnnotation = "node-manager.deckhouse.io/chaos-last-victim"
	// StandbyHolderPrefix names the Deployment standby-holder-<group> that
	// keeps a CloudEphemeral group's standby capacity (cloudInstances.standby):
	// pods of StandbyPriorityClass, each holding overprovisioningRate
	// percent of a node, that the cluster-autoscaler adds nodes for and
	// that any real pod preempts. StandbyHolderContainer is its one
	// container, running StandbyHolderImage (upstream's pause, pinned; the
	// Deployments admission policy admits this image only).
	StandbyHolderPrefix    = "standby-holder-"
	StandbyHolderContainer = "standby-holder"
	StandbyHolderImage     = "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"
	StandbyPriorityClass   = "d8-node-manager-standby"
	// ChaosModeDrainAndDelete is chaos.mode's value that turns chaos on.
	ChaosModeDrainAndDelete = "DrainAndDelete"
	// CloudZoneAnnotation and InstanceClassChecksumAnnotation are on a
	// CloudEphemeral group's MachineDeployments and copies of its class,
	// as Deckhouse writes them: the zone, and the checksum of the class's
	// content the copy was made from.
	CloudZoneAnnotation             = "zone"
	InstanceClassChecksumAnnotation = "checksum/instance-class"
	// TokenExpiresAtAnnotation is the expiry (RFC 3339) of the bootstrap
	// token inside the manual-bootstrap Secret, readable without decoding
	// the script.
	TokenExpiresAtAnnotation = "node-manager.deckhouse.io/token-expires-at"
	// TokenIDAnnotation is the public id of that token.
	TokenIDAnnotation = "node-manager.deckhouse.io/token-id"

	// FencingGossipKeySecretPrefix + <group> is the Secret holding the
	// group's fencing gossip keyring (agents/fencing-agent/gossipkey):
	// node-manager-controller alone writes it, and the group's fencing-agent
	// pods mount it (the kubelet reads it for them). Its data keys follow.
	FencingGossipKeySecretPrefix = "fencing-agent-gossip-"
	// FencingGossipKeyPrimary is the key every agent encrypts with.
	FencingGossipKeyPrimary = "primary"
	// FencingGossipKeyNext is, during a rotation, the key being handed out
	// before it becomes primary; agents accept it.
	FencingGossipKeyNext = "next"
	// FencingGossipKeyPrevious is, during a rotation, the key that was
	// primary; agents still accept it until every agent encrypts with the
	// new one.
	FencingGossipKeyPrevious = "previous"
	// FencingGossipRotatedAtAnnotation on that Secret is when its primary
	// key was made (RFC 3339); the controller rotates it once it is older
	// than its --fencing-gossip-key-rotation-period.
	FencingGossipRotatedAtAnnotation = "node-manager.deckhouse.io/gossip-key-rotated-at"
	// FencingGossipRotateAnnotation (any value), set by a person on that
	// Secret, asks for a rotation now; the controller removes it once the
	// rotation has begun.
	FencingGossipRotateAnnotation = "node-manager.deckhouse.io/rotate-gossip-key"
	// FencingGossipKeyringAnnotation is set by the fencing agent on its own
	// Node to the fingerprint of the gossip keyring it uses
	// (gossipkey.Keys.Fingerprint, never a key), so the controller knows
	// when every agent of the group has the Secret's current keys.
	FencingGossipKeyringAnnotation = "node-manager.deckhouse.io/fencing-gossip-keyring"
)

// Certificates node-manager-controller keeps (controllers/certificates,
// with --manage-certificates): a CA, the serving certificates of the
// Services in Namespace that the API server calls (Secrets of type
// kubernetes.io/tls, keys tls.crt, tls.key and ca.crt), and the caBundle of
// every APIService, webhook configuration and CRD conversion webhook that
// carries InjectCABundleLabel and points at one of those Services.
const (
	// CertificateAuthoritySecret (type kubernetes.io/tls) holds the CA that
	// signs the serving certificates (tls.crt, tls.key), the bundle every
	// consumer trusts (ca.crt: that CA, and while it rotates also the next or
	// the previous one), and during a rotation the next CA (next.crt,
	// next.key) until every consumer trusts it.
	CertificateAuthoritySecret = "node-manager-ca"
	// CANextCertKey and CANextKeyKey hold the next CA in
	// CertificateAuthoritySecret while a rotation waits for every consumer
	// to trust it.
	CANextCertKey = "next.crt"
	CANextKeyKey  = "next.key"
	// BashibleAPIServerTLSSecret is bashible-apiserver's serving certificate
	// (for the Service bashible-api), mounted by its Deployment.
	BashibleAPIServerTLSSecret = "bashible-api-server-tls"
	// InjectCABundleLabel ("true") on an APIService,
	// ValidatingWebhookConfiguration, MutatingWebhookConfiguration or
	// CustomResourceDefinition asks node-manager-controller to keep the
	// caBundle of each of its client configurations whose service is one of
	// the Services it issues certificates for; others are left alone.
	InjectCABundleLabel = "node-manager.deckhouse.io/inject-ca-bundle"
	// RenewBeforeAnnotation (RFC 3339) on the CA Secret or a serving
	// certificate's Secret forces a rotation: a certificate issued before
	// that time is replaced, with the same care as a scheduled rotation.
	RenewBeforeAnnotation = "node-manager.deckhouse.io/renew-before"
)

// Bootstrap tokens (kube-system Secrets bootstrap-token-<id>, written by
// node-manager-controller; kube-apiserver authenticates them).
const (
	// TokenNodeGroupLabel on a bootstrap token Secret names the group the
	// token joins; node-manager-controller watches only Secrets with it.
	TokenNodeGroupLabel = "node-manager.deckhouse.io/node-group"
	// HeritageLabel marks the objects node-manager-controller writes in
	// kube-system, with the value HeritageNodeManager.
	HeritageLabel       = "heritage"
	HeritageNodeManager = "node-manager"

	// BootstrappersGroup is an extra group (auth-extra-groups) of every
	// node-manager bootstrap token: RBAC lets it create kubelet CSRs and
	// read bundles.
	BootstrappersGroup = "system:bootstrappers:d8-node-manager"
	// BootstrapperGroupPrefix + <group> is the other extra group of a
	// token: the node group it was issued for. kube-apiserver authenticates
	// the token with it, so bashible-apiserver and the CSR approver learn a
	// token's group from the request itself, never from a Secret.
	BootstrapperGroupPrefix = "system:bootstrappers:d8-node-manager:"
)

// The render context bashible-apiserver's leader publishes in Namespace for
// authors of NodeGroupConfigurations, where Deckhouse's documentation tells
// them to read it (apiserver/bundles/contextsecret.go).
const (
	// ContextSecret is the Secret holding every group's render context
	// (credentials redacted). It is an output only: nothing reads it back.
	ContextSecret = "bashible-apiserver-context"
	// ContextSecretKey holds the contexts as YAML.
	ContextSecretKey = "input.yaml"
)

// Objects bashible-apiserver writes in BundlesNamespace: one Secret per
// group holding the last good bundle, which every replica serves.
const (
	// PublishedBundleSecretPrefix + <group> is a published bundle's Secret.
	PublishedBundleSecretPrefix = "bashible-bundle-"
	// PublishedBundleKey holds the bundle as gzipped JSON.
	PublishedBundleKey = "bundle.json.gz"
	// PublishedBundleAppLabel (value BashibleAPIServerName) marks the
	// Secrets bashible-apiserver publishes; replicas watch only those.
	PublishedBundleAppLabel = "app"
	// RevisionSecretPrefix + <group> + "-" + <n> is revision n of a
	// group's bundle: an immutable Secret holding the bundle as published
	// (PublishedBundleKey), kept for pinning and rollback.
	RevisionSecretPrefix = "bashible-revision-"
	// RevisionOfLabel on a revision Secret names its group; the leader
	// lists a group's revisions by it. Revision Secrets carry no
	// PublishedBundleAppLabel, so replicas do not hold them in memory.
	RevisionOfLabel = "bashible.deckhouse.io/revision-of"
)

// The early-oom agent's settings: the ConfigMap EarlyOOMName in Namespace.
const (
	// EarlyOOMSettingsKey is the key of that ConfigMap holding the
	// thresholds and the mode, for the cluster and per node group
	// (agents/early-oom/settings).
	EarlyOOMSettingsKey = "settings.yaml"
)

// Static machines: Cluster API Provider Static (controllers/caps, the
// caps-controller-manager binary) and the StaticInstance objects it manages.
const (
	// CAPSControllerManagerName is caps-controller-manager's name: its field
	// manager, its ServiceAccount and leader Lease in Namespace, and its
	// Event source. It is the only identity besides cluster admins that may
	// read SSHCredentials (manifests/caps-controller-manager/rbac.yaml).
	CAPSControllerManagerName = "caps-controller-manager"
	// CAPSBootstrapDataRole is the Role in Namespace, bound to
	// caps-controller-manager by its manifests, that node-manager-controller
	// (controllers/clusterapi, --cluster-api) keeps granting get on exactly
	// the bootstrap-data Secrets of the static groups wired to Cluster API
	// (ManualBootstrapSecretPrefix + <group>), by name: the only Secrets of
	// Namespace CAPS may read.
	CAPSBootstrapDataRole = "d8:node-manager:caps-controller-manager:bootstrap-data"

	// AllowBootstrapLabel = "false" on a StaticInstance keeps it out of
	// every group: CAPS never picks it, whatever a group's labelSelector
	// says (Deckhouse's rule; a group's selector may not mention the key).
	AllowBootstrapLabel = "node.deckhouse.io/allow-bootstrap"

	// SkipBootstrapPhaseAnnotation (any value) on a Pending StaticInstance
	// hands over a host that already is a node: CAPS writes only the
	// provider id and machine name files on it, goes Running, and removes
	// the annotation. It may be added only while the instance is Pending
	// (manifests/policies/static-instances.yaml).
	SkipBootstrapPhaseAnnotation = "static.node.deckhouse.io/skip-bootstrap-phase"

	// SSHHostKeyAnnotation on a StaticInstance is the host's SSH public key
	// in authorized_keys form ("ssh-ed25519 AAAA..."). An admin sets it
	// before CAPS first connects (the host is then trusted only with that
	// key), or allows trust on first use (SSHHostKeyTrustOnFirstUseAnnotation)
	// and CAPS pins the key it sees on its first connection. Without
	// either, CAPS never contacts the host: the instance is in Error with
	// reason HostKeyNotPinned. A host presenting any other key is refused
	// until an admin changes or removes the annotation. Only a requester
	// allowed the verb TrustHostKeyVerb on the StaticInstance may set,
	// change or remove it (manifests/policies/static-instance-trust.yaml);
	// CAPS may only pin it on first use.
	SSHHostKeyAnnotation = "static.node.deckhouse.io/ssh-host-key"

	// SSHHostKeyTrustOnFirstUseAnnotation = "true" on a StaticInstance lets
	// CAPS trust the host key it sees on its first connection to the host
	// and pin it (SSHHostKeyAnnotation): an admin's explicit choice per
	// host, writable like SSHHostKeyAnnotation.
	SSHHostKeyTrustOnFirstUseAnnotation = "static.node.deckhouse.io/ssh-host-key-trust-on-first-use"

	// TrustHostKeyVerb on staticinstances (group deckhouse.io) is what a
	// requester must be allowed to write a StaticInstance's host key
	// annotations: cluster admins have it (verbs *), the ClusterRole
	// StaticHostKeysRole grants it.
	TrustHostKeyVerb = "trust-host-key"

	// UseVerb on sshcredentials (group deckhouse.io) is what a requester
	// must be allowed to name SSHCredentials in a StaticInstance's
	// credentialsRef (manifests/policies/static-instance-trust.yaml): CAPS
	// sends those credentials, password included, to the instance's host.
	// Cluster admins have it (verbs *); the ClusterRole
	// SSHCredentialsUserRole grants it for every SSHCredentials, and a copy
	// with resourceNames for some.
	UseVerb = "use"

	// SSHCredentialsUserRole and StaticHostKeysRole are the ClusterRoles
	// (manifests/caps-controller-manager/user-roles.yaml) an admin binds to
	// delegate the verbs above.
	SSHCredentialsUserRole = "d8:node-manager:sshcredentials-user"
	StaticHostKeysRole     = "d8:node-manager:static-host-keys"

	// SSHCredentialsNamespace holds the Secrets that SSHCredentials name
	// (privateSSHKeySecretRef, sudoPasswordSecretRef): the only namespace
	// whose Secrets caps-controller-manager may read besides its own
	// bootstrap data, so it reads no other Secret of the cluster.
	SSHCredentialsNamespace = "d8-ssh-credentials"

	// The default keys of those Secrets: the key of a Secret of type
	// kubernetes.io/ssh-auth and the password of one of type
	// kubernetes.io/basic-auth.
	SSHPrivateKeySecretKey = "ssh-privatekey"
	SSHPasswordSecretKey   = "password"

	// AllowControlPlaneAnnotation (value "true") on a StaticInstance lets
	// CAPS adopt or clean it although its Node is a control-plane node.
	// Without it CAPS refuses both: Deckhouse's CAPS once adopted a single
	// master and later wiped it.
	AllowControlPlaneAnnotation = "static.node.deckhouse.io/allow-control-plane"
)

// PinAcrossClusterSettingsVerb is the RBAC verb on nodegroups (a verb of
// node-manager's own, which no built-in role but cluster-admin's "*"
// grants) that a user needs to set PinAcrossClusterSettingsAnnotation.
const PinAcrossClusterSettingsVerb = "pin-across-cluster-settings"

// Addresses on the node.
const (
	// NodeAPIProxyURL is the node's local API proxy (HAProxy, unit
	// kubernetes-api-proxy, made by the bundle's step 055_api_proxy), which
	// balances over the API servers: the kubelet's path to the API. The
	// fencing agent (host network) checks the API through it too, so "the
	// API answers" means what it means for the kubelet, not for the
	// Service VIP (kube-proxy, the CNI).
	NodeAPIProxyURL = "https://127.0.0.1:6445"
)

// ConversionDataAnnotation holds, on an object read at an older version of
// its kind, the storage version's spec and status that the older version
// cannot express (JSON). The conversion webhook writes it going down and
// reads it going up, so an object edited at an older version keeps what
// only the newer one holds (apiserver/conversion).
const ConversionDataAnnotation = "node-manager.deckhouse.io/conversion-data"

// OlderVersionFieldsAnnotation holds, on a stored object, the fields an
// older version of its kind has and the storage version has no place for
// (JSON, by version: {"v1alpha1":{"spec":{"kubernetesVersion":"1.16"}}}).
// The conversion webhook writes a version's entry when the object is
// written at that version and gives the fields back when it is read
// there; nothing else reads them (apiserver/conversion).
const OlderVersionFieldsAnnotation = "node-manager.deckhouse.io/older-version-fields"
