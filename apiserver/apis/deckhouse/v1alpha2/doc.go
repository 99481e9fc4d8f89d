// Package v1alpha2 holds the deckhouse.io/v1alpha2 API of static machines
// for Cluster API Provider Static (controllers/caps): StaticInstance (a host
// CAPS may bootstrap into a node group over SSH, and cleans when it leaves)
// and SSHCredentials (how to log in to it). Both are cluster-scoped and
// spelled as Deckhouse's storage version v1alpha2, so Deckhouse's
// manifests and users' commands apply unchanged. It also holds Instance as
// Deckhouse 1.77 serves it, stored at v1alpha1, and NodeGroup as Deckhouse
// served it at v1alpha2, stored at v1 (apiserver/conversion converts).
//
// What the schema cannot say is in the CRDs' CEL rules (either a key or a
// password; an address never changes) and in the ValidatingAdmissionPolicy
// objects of manifests/policies/static-instances.yaml (which phases allow
// deletion, when the skip-bootstrap-phase annotation may be set, the value
// of the allow-bootstrap label); there is no webhook.
//
// Deepcopy functions and clients are generated (`make generate`); the CRDs in
// manifests/crds/ come from controller-gen reading the markers here.
//
// +k8s:deepcopy-gen=package
// +groupName=deckhouse.io
package v1alpha2
