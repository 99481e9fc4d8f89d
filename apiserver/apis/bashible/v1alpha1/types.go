package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bashible is the node agent of a node group: data["bashible.sh"].
//
// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=get,list,watch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Bashible struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Data holds one key, bashible.sh: the agent script.
	Data map[string]string `json:"data"`
}

// BashibleList is a list of Bashibles.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type BashibleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Bashible `json:"items"`
}

// NodeGroupBundle holds the steps every node of a group runs, in name order:
// data["<NNN>_<step>.sh"] is a bash script.
//
// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=get,list,watch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeGroupBundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Data maps each step's file name (<NNN>_<step>.sh, run in byte order)
	// to its script.
	Data map[string]string `json:"data"`
	// Revisions are the group's kept bundle revisions, oldest first: the
	// last revisions published (bashible-apiserver's --revision-history,
	// default 5) and the one the group is pinned to. The annotation
	// bashible.deckhouse.io/revision names the one Data holds.
	// +optional
	// +listType=atomic
	Revisions []NodeGroupBundleRevision `json:"revisions,omitempty"`
}

// NodeGroupBundleRevision is one bundle a group has had: a configuration
// the group may be pinned to (NodeGroup spec.update.pinnedRevision).
type NodeGroupBundleRevision struct {
	// Revision numbers the group's bundles in the order they were
	// published, from 1.
	Revision int64 `json:"revision"`
	// Checksum is the revision's configuration checksum.
	Checksum string `json:"checksum"`
	// PublishedAt is when the revision was first published.
	PublishedAt metav1.Time `json:"publishedAt"`
	// ChangedSteps are the steps (<NNN>_<step>.sh, and bashible.sh) added,
	// changed or removed since the revision before it; empty for the first
	// kept revision.
	// +optional
	// +listType=atomic
	ChangedSteps []string `json:"changedSteps,omitempty"`
}

// NodeGroupBundleList is a list of NodeGroupBundles.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type NodeGroupBundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []NodeGroupBundle `json:"items"`
}

// Bootstrap is the script a new machine of a group runs once, with the
// group's bootstrap token and the cluster CA in /var/lib/bashible, to fetch
// bashible.sh and converge.
//
// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=get,list,watch
// +resourceName=bootstrap
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Bootstrap struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Bootstrap is the script.
	Bootstrap string `json:"bootstrap"`
}

// BootstrapList is a list of Bootstraps.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type BootstrapList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Bootstrap `json:"items"`
}
