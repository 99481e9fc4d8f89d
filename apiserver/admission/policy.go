package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

// Deckhouse's NodeGroup rules that need more than the object (the rules
// that need only the object are CEL rules of the CRD). The messages are
// Deckhouse's (its node-manager's NodeGroup webhook), word for word.
const (
	customContainerdMessage = "CRI cannot be changed because some nodes are using custom configuration: %s"
	containerdV2Message     = "It is forbidden for NodeGroup %q to use CRI ContainerdV2 because it contains nodes that do not support ContainerdV2. " +
		"You can list them with: kubectl get node -l " + deckhousev1.ContainerdV2UnsupportedLabel + "," + deckhousev1.NodeGroupLabel + "=%s"
	swapMessage          = "memorySwap requires cgroup v2, but NodeGroup %q contains nodes where cgroup v2 is not supported"
	maxPodsWarning       = ".spec.kubelet.maxPods (%d) is too high: may lead to IP exhaustion"
	masterCRIWarning     = "it is disruptive to change cri.type in master node group for cluster with apiserver endpoints < 3"
	masterGroup          = "master"
	limitedSwap          = "LimitedSwap"
	minMasterAPIEndpoint = 3
)

// GroupNodes gives the labels of a group's nodes.
type GroupNodes interface {
	// Labels maps each node of group to its Node's labels.
	Labels(group string) (map[string]map[string]string, error)
}

// NodeLabelReader is one Node's labels by name, false when there is no
// such Node.
type NodeLabelReader func(name string) (map[string]string, bool, error)

// InstanceGroupNodes takes a group's nodes from their Instances, whose
// node.deckhouse.io/group label only node-manager writes (a node's own
// group label is the kubelet's to write, so a node could not join another
// group's set by relabelling itself), and each node's labels from its
// Node. Those labels are the node's own report (bashible writes them with
// the node's credentials): a node could forge them, but only to block a
// change of its own group.
type InstanceGroupNodes struct {
	Instances nmlisters.InstanceLister
	Nodes     NodeLabelReader
	// Synced reports whether both caches are loaded; until they are, the
	// policy refuses rather than judge a group by no nodes.
	Synced func() bool
}

// Labels maps each node of group to its labels; a node whose Node is gone
// is left out.
func (g InstanceGroupNodes) Labels(group string) (map[string]map[string]string, error) {
	if g.Synced != nil && !g.Synced() {
		return nil, errors.New("the Instances and Nodes are not loaded yet")
	}
	list, err := g.Instances.List(labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}))
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, inst := range list {
		l, ok, err := g.Nodes(inst.Name)
		if err != nil {
			return nil, err
		}
		if ok {
			out[inst.Name] = l
		}
	}
	return out, nil
}

// Refusal is why Deckhouse's rules refuse changing old into ng, empty when
// they do not; an error when the group's nodes cannot be read. Each rule
// guards a change into something the group's nodes cannot take, so it is
// judged on that change only (Deckhouse judges every later update of the
// group too, which blocks unrelated changes and protects nothing more):
//   - a change of cri.type while a node has /etc/containerd/conf.d files
//     (node.deckhouse.io/containerd-config=custom);
//   - a change to cri.type ContainerdV2 while a node cannot run it
//     (node.deckhouse.io/containerd-v2-unsupported);
//   - turning on memorySwap.swapBehavior LimitedSwap while a node reports a
//     cgroup file system other than cgroup v2 (node.deckhouse.io/cgroup; a
//     node that has reported none yet is not held against the group).
func Refusal(old, ng *deckhousev1.NodeGroup, nodes GroupNodes) (string, error) {
	if old == nil || ng == nil {
		return "", nil
	}
	criChanged := criType(old, "") != criType(ng, "")
	toV2 := criChanged && criType(ng, "") == string(deckhousev1.CRIContainerdV2)
	swapOn := swapBehavior(ng) == limitedSwap && swapBehavior(old) != limitedSwap
	if !criChanged && !swapOn {
		return "", nil
	}
	labelsOf, err := nodes.Labels(ng.Name)
	if err != nil {
		return "", fmt.Errorf("read the nodes of NodeGroup %s: %w", ng.Name, err)
	}
	if criChanged {
		if custom := matching(labelsOf, func(l map[string]string) bool {
			return l[deckhousev1.ContainerdConfigLabel] == deckhousev1.ContainerdConfigCustomValue
		}); len(custom) > 0 {
			return fmt.Sprintf(customContainerdMessage, strings.Join(custom, " ")), nil
		}
	}
	if toV2 {
		if unsupported := matching(labelsOf, func(l map[string]string) bool {
			_, ok := l[deckhousev1.ContainerdV2UnsupportedLabel]
			return ok
		}); len(unsupported) > 0 {
			return fmt.Sprintf(containerdV2Message, ng.Name, ng.Name), nil
		}
	}
	if swapOn {
		if v1 := matching(labelsOf, func(l map[string]string) bool {
			v, ok := l[deckhousev1.CgroupLabel]
			return ok && v != deckhousev1.CgroupV2Value
		}); len(v1) > 0 {
			return fmt.Sprintf(swapMessage, ng.Name), nil
		}
	}
	return "", nil
}

// Warnings are Deckhouse's warnings about ng (old is nil on create): a
// maxPods that the node's pod subnet cannot hold twice over (a pod's
// address is held while its replacement starts), and a change of the
// master group's runtime with fewer than three API servers (each master
// restarts its runtime, and with it its API server).
func Warnings(old, ng *deckhousev1.NodeGroup, in bundles.Inputs) []string {
	var out []string
	settings := cluster(in)
	if k := ng.Spec.Kubelet; k != nil && k.MaxPods != nil {
		available := (1 << (32 - settings.PodSubnetNodeCIDRPrefix)) - 3
		if 2*int(*k.MaxPods) > available {
			out = append(out, fmt.Sprintf(maxPodsWarning, *k.MaxPods))
		}
	}
	if old != nil && ng.Name == masterGroup && criType(old, settings.DefaultCRI) != criType(ng, settings.DefaultCRI) &&
		len(in.Endpoints) < minMasterAPIEndpoint {
		out = append(out, masterCRIWarning)
	}
	return out
}

// cluster is the cluster settings of in, or their defaults when the
// cluster configuration does not parse (groups then fail to render, which
// is reported elsewhere).
func cluster(in bundles.Inputs) templates.Cluster {
	if s, err := templates.ParseClusterConfiguration(in.ClusterConfiguration); err == nil {
		return s.Cluster
	}
	return templates.Cluster{PodSubnetNodeCIDRPrefix: templates.DefaultPodSubnetPrefix, DefaultCRI: templates.DefaultCRI}
}

// criType is ng's cri.type, else def, else Containerd (as Deckhouse
// compares them).
func criType(ng *deckhousev1.NodeGroup, def string) string {
	if c := ng.Spec.CRI; c != nil && c.Type != "" {
		return string(c.Type)
	}
	if def != "" {
		return def
	}
	return string(deckhousev1.CRIContainerd)
}

func swapBehavior(ng *deckhousev1.NodeGroup) string {
	if k := ng.Spec.Kubelet; k != nil && k.MemorySwap != nil {
		return k.MemorySwap.SwapBehavior
	}
	return ""
}

// matching are the names of the nodes whose labels match, sorted.
func matching(nodes map[string]map[string]string, match func(map[string]string) bool) []string {
	var out []string
	for name, l := range nodes {
		if match(l) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// PolicyWebhook is the HTTP handler of the NodeGroup policy webhook, which
// kube-apiserver calls for the changes Refusal judges (its
// matchConditions) and which fails closed: while bashible-apiserver cannot
// answer, such a change is refused and can be retried.
type PolicyWebhook struct{ nodes GroupNodes }

// NewPolicyWebhook answers reviews from the nodes of each group.
func NewPolicyWebhook(nodes GroupNodes) *PolicyWebhook { return &PolicyWebhook{nodes: nodes} }

// ServeHTTP answers one AdmissionReview.
func (wh *PolicyWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		http.Error(w, fmt.Sprintf("read the AdmissionReview (at most %d bytes): %v", maxReviewBytes, err), http.StatusBadRequest)
		return
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an admission.k8s.io/v1 AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	d := wh.review(r.Context(), review.Request)
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: d.Allowed}
	if !d.Allowed {
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
			Reason: metav1.StatusReasonInvalid, Message: d.Message}
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}); err != nil {
		klog.ErrorS(err, "Writing an admission response failed", "uid", review.Request.UID)
	}
}

// review decides one request: only updates of NodeGroups are judged.
func (wh *PolicyWebhook) review(_ context.Context, req *admissionv1.AdmissionRequest) Decision {
	if req.Operation != admissionv1.Update || req.Kind != nodeGroupKind {
		return Decision{Allowed: true}
	}
	ng, old := &deckhousev1.NodeGroup{}, &deckhousev1.NodeGroup{}
	if err := json.Unmarshal(req.Object.Raw, ng); err != nil {
		return Decision{Message: fmt.Sprintf("cannot read the NodeGroup under review: %v", err)}
	}
	if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
		return Decision{Message: fmt.Sprintf("cannot read the NodeGroup's stored version: %v", err)}
	}
	msg, err := Refusal(old, ng, wh.nodes)
	if err != nil {
		klog.ErrorS(err, "Judging a NodeGroup change failed", "nodeGroup", ng.Name)
		return Decision{Message: fmt.Sprintf("node-manager cannot check this change of NodeGroup %s against its nodes (%v); try again", ng.Name, err)}
	}
	klog.V(2).InfoS("Judged a NodeGroup change", "nodeGroup", ng.Name, "refused", msg != "")
	return Decision{Allowed: msg == "", Message: msg}
}
