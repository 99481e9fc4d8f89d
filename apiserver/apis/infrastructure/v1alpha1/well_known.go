package v1alpha1

// The wire names of node-manager's use of Cluster API: the objects
// node-manager-controller writes for Cluster API Provider Static (CAPS), the
// Cluster API labels and Secret conventions it follows, and the names of the
// Cluster API core manager (capi-controller-manager) that runs on them. As in
// apiserver/apis/deckhouse/v1/well_known.go, each value is written here once
// and used everywhere else by its constant (hack/verify-wire-names.sh).
//
// The objects live in deckhousev1.Namespace (d8-cloud-instance-manager), as
// in Deckhouse: the Cluster, StaticCluster and StaticControlPlane named
// StaticClusterName, the Cluster's kubeconfig Secret, and per static group a
// MachineDeployment and a StaticMachineTemplate named after the group, whose
// Machines take their bootstrap data from the group's manual-bootstrap Secret
// (deckhousev1.ManualBootstrapSecretPrefix + <group>).

// Objects and identities.
const (
	// StaticClusterName names the one Cluster API Cluster every static group
	// shares, its StaticCluster and its StaticControlPlane.
	StaticClusterName = "static"
	// StaticKubeconfigSecret is the Cluster's kubeconfig Secret
	// (<cluster>-kubeconfig, Cluster API's convention): how Cluster API
	// reaches the cluster's Nodes to find, drain and delete a Machine's Node.
	StaticKubeconfigSecret = "static-kubeconfig"
	// ClusterSecretValueKey is the key of a Cluster API Secret's content:
	// the kubeconfig in that Secret, a Machine's bootstrap data in its
	// bootstrap-data Secret.
	ClusterSecretValueKey = "value"
	// BootstrapDataFormatKey is the key of a bootstrap-data Secret's
	// format (node-manager writes cloud-config,
	// deckhousev1.ManualBootstrapCloudConfigKey, named after it).
	BootstrapDataFormatKey = "format"
	// ClusterSecretType is the type Cluster API gives the Secrets it reads.
	ClusterSecretType = "cluster.x-k8s.io/secret"

	// CAPIControllerManagerName is the Cluster API core manager's name: its
	// ServiceAccount in deckhousev1.Namespace and its binary.
	CAPIControllerManagerName = "capi-controller-manager"
	// CAPIWebhookService is the Service (in deckhousev1.Namespace) in front
	// of capi-controller-manager's webhooks, and CAPIWebhookSecret its
	// serving certificate (type kubernetes.io/tls), which
	// node-manager-controller issues with --manage-certificates.
	CAPIWebhookService = "capi-webhook-service"
	CAPIWebhookSecret  = "capi-webhook-service-cert"
	// ClusterAPIFieldManager is the field manager of what the clusterapi
	// controller (controllers/clusterapi, inside node-manager-controller)
	// applies: the Cluster objects, the groups' MachineDeployments and
	// templates, and an Instance's machineRef and bootstrapStatus. It differs
	// from node-manager-controller's own manager because the instances
	// controller applies the rest of the Instance status with Force: with
	// one manager, each apply would remove the other's fields.
	ClusterAPIFieldManager = "node-manager-controller-clusterapi"
)

// Cluster API's labels and annotations.
const (
	// ClusterNameLabel names the Cluster an object belongs to (Cluster API
	// sets it on Machines; its kubeconfig Secret must carry it).
	ClusterNameLabel = "cluster.x-k8s.io/cluster-name"
	// ContractLabel on a provider CRD lists the CRD's versions that speak
	// the v1beta2 contract; Cluster API resolves the version of a reference
	// that names only group and kind from it. On our CRDs through the
	// kubebuilder markers of this package.
	ContractLabel = "cluster.x-k8s.io/v1beta2"
)

// Finalizers.
const (
	// InstanceMachineFinalizer is on the Instance of a node that a Cluster
	// API Machine backs: deleting the Instance deletes the Machine (Cluster
	// API drains the Node, CAPS cleans and releases the host), and the
	// Instance goes once the Machine has, as in Deckhouse.
	InstanceMachineFinalizer = "node-manager.deckhouse.io/machine"
)

// Cluster API Provider Static's own names (controllers/caps).
const (
	// StaticMachineFinalizer is CAPS's finalizer on a StaticMachine: Cluster
	// API deletes the StaticMachine after draining its Node, and CAPS lets it
	// go only once the host is cleaned and its StaticInstance is Pending again
	// (Deckhouse's name).
	StaticMachineFinalizer = "staticmachine.infrastructure.cluster.x-k8s.io"
	// ProviderIDPrefix + <StaticInstance UID> is the providerID of a static
	// machine: CAPS sets it on the StaticMachine and writes it to the host's
	// /var/lib/bashible/node-spec-provider-id, from which the kubelet
	// registers its Node with it (Deckhouse's form).
	ProviderIDPrefix = "static:///"
	// CleanupRefusedReason is the reason of a deleted StaticMachine's Ready
	// condition while CAPS refuses to clean its host (a control-plane node,
	// or a host that is another Node); the message says why and what to do.
	// Cluster API mirrors it into the Machine's InfrastructureReady, and
	// node-manager-controller shows it on the node's Instance
	// (status.lastOperation).
	CleanupRefusedReason = "CleanupRefused"
	// BootstrapDataUnavailableReason is the reason of a StaticMachine's
	// Ready condition while CAPS cannot read its Machine's bootstrap data
	// Secret (missing, or not granted to caps-controller-manager): the
	// bootstrap does not start, the message names the Secret and what is
	// missing, and CAPS tries again.
	BootstrapDataUnavailableReason = "BootstrapDataUnavailable"
)
