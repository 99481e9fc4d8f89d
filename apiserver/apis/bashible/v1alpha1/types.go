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
