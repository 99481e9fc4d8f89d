// Package v1alpha1 holds the deckhouse.io/v1alpha1 API: NodeGroupConfiguration
// (users' own bundle steps) and Instance (a machine of a group, status only),
// both stored at this version; and NodeGroup, SSHCredentials,
// StaticInstance and NodeUser as Deckhouse first served them, stored at a
// newer version (apiserver/conversion converts).
//
// Deepcopy functions and clients are generated (`make generate`); the CRDs in
// manifests/crds/ come from controller-gen reading the markers here.
//
// +k8s:deepcopy-gen=package
// +groupName=deckhouse.io
package v1alpha1
