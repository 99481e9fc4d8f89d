// Package v1alpha1 holds the infrastructure.cluster.x-k8s.io/v1alpha1 API of
// Cluster API Provider Static (CAPS), the infrastructure provider that turns
// StaticInstances (deckhouse.io) into Cluster API Machines:
//
//   - StaticCluster: the infrastructure of the one Cluster "static" all
//     static groups share (no cloud resources; CAPS only reports it provisioned);
//   - StaticControlPlane: the externally managed control plane of that
//     Cluster. node-manager does not run the control plane through Cluster
//     API, but Cluster API drains and deletes the Nodes of Machines only once
//     the Cluster's control plane reports itself initialized and externally
//     managed, so this object exists to say exactly that;
//   - StaticMachineTemplate: per NodeGroup, the template the group's
//     MachineDeployment clones into StaticMachines (which StaticInstances may
//     back them);
//   - StaticMachine: one Machine's infrastructure — the StaticInstance that
//     backs it (spec.providerID) and whether it is provisioned.
//
// Names and fields follow Deckhouse's CAPS (kinds, group, version, field
// names) so that objects written for Deckhouse read the same here; the
// status carries both Deckhouse's v1beta1-contract fields (ready,
// initialized) and the fields of the Cluster API v1beta2 contract
// (initialization.*) that Cluster API v1.14 reads. The CRDs carry the label
// cluster.x-k8s.io/v1beta2=v1alpha1, by which Cluster API resolves the version
// of a reference that names only group and kind.
//
// node-manager-controller writes StaticCluster, StaticControlPlane and the
// templates (controllers/clusterapi); Cluster API clones StaticMachines; the
// CAPS controllers fill their status. Deepcopy functions and clients are
// generated (`make generate`); the CRDs in manifests/crds/ come from
// controller-gen reading the markers here.
//
// +k8s:deepcopy-gen=package
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1
