// Package v1 holds the deckhouse.io/v1 API: NodeGroup, the object users
// create to describe a set of nodes that share one configuration.
//
// The Go types are the source of truth: deepcopy functions and the typed
// clients under generated/ come from k8s.io/code-generator, and the CRD in
// manifests/crds/ comes from controller-gen reading the markers here
// (`make generate`; `make verify-generated` fails on drift).
//
// +k8s:deepcopy-gen=package
// +groupName=deckhouse.io
package v1
