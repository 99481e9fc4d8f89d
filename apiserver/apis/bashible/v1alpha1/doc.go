// Package v1alpha1 is the bashible.deckhouse.io/v1alpha1 API served by
// bashible-apiserver: read-only objects computed from cluster state, one of
// each kind per node group, named after the group.
//
//   - Bashible (bashibles): data["bashible.sh"], the node agent itself.
//   - NodeGroupBundle (nodegroupbundles): data["<NNN>_<step>.sh"], the steps.
//   - Bootstrap (bootstrap): bootstrap, the script a new machine runs once.
//
// Every object carries the group's configuration checksum in the annotation
// bashible.deckhouse.io/configuration-checksum and the group's name and node
// type in the labels node.deckhouse.io/group and node.deckhouse.io/type.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=io.deckhouse.bashible.v1alpha1
// +groupName=bashible.deckhouse.io
package v1alpha1
