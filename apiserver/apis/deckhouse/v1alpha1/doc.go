// Package v1alpha1 holds the deckhouse.io/v1alpha1 API: NodeGroupConfiguration
// (users' own bundle steps), Instance (a machine of a group, status only)
// and NodeGroup as Deckhouse first served it (stored at v1; see
// apiserver/conversion).
//
// Deepcopy functions and clients are generated (`make generate`); the CRDs in
// manifests/crds/ come from controller-gen reading the markers here.
//
// +k8s:deepcopy-gen=package
// +groupName=deckhouse.io
package v1alpha1
