package nodetemplate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// reservedPrefixes are key namespaces of node-manager's own protocol. A
// template key inside them would fight bashible, update approval or this
// controller (a template uninitialized taint would be removed and re-added
// forever), so such keys are skipped.
var reservedPrefixes = []string{deckhousev1.NodeDomain, deckhousev1.UpdateAnnotationPrefix, deckhousev1.NodeManagerDomain}

// reservedKeys are node-manager's own keys outside its namespaces: the
// restricted group label, under the node-restriction.kubernetes.io/ prefix
// (whose other keys an admin may well want templates to set: that prefix
// is Kubernetes' way to label nodes for workload isolation).
var reservedKeys = []string{deckhousev1.NodeGroupRestrictedLabel}

// Reserved reports whether key is in node-manager's own namespaces or is
// one of its own keys.
func Reserved(key string) bool {
	if slices.Contains(reservedKeys, key) {
		return true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// skipReason says why a template entry is not applied, or "" when it is.
// Entries the Node API would reject are skipped one by one, so a single
// bad key does not hold back the rest of the template on every node.
func skipReason(key string, value *string) string {
	if Reserved(key) {
		return "reserved for node-manager"
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return "invalid key: " + strings.Join(errs, "; ")
	}
	if value != nil {
		if errs := validation.IsValidLabelValue(*value); len(errs) > 0 {
			return "invalid value: " + strings.Join(errs, "; ")
		}
	}
	return ""
}

// Skipped lists the template's entries that Desired leaves out, each as
// "label k (reason)", "annotation k (reason)" or "taint k:Effect (reason)", sorted.
func Skipped(ng *deckhousev1.NodeGroup) []string {
	t := ng.Spec.NodeTemplate
	if t == nil {
		return nil
	}
	var out []string
	for k, v := range t.Labels {
		if r := skipReason(k, &v); r != "" {
			out = append(out, "label "+k+" ("+r+")")
		}
	}
	for k := range t.Annotations {
		if r := skipReason(k, nil); r != "" {
			out = append(out, "annotation "+k+" ("+r+")")
		}
	}
	for _, tt := range t.Taints {
		if r := skipReason(tt.Key, &tt.Value); r != "" {
			out = append(out, "taint "+tt.Key+":"+string(tt.Effect)+" ("+r+")")
		}
	}
	slices.Sort(out)
	return out
}

// Applied is what the controller applied to a node: the content of the
// last-applied annotation. Empty fields serialise as {} and [].
type Applied struct {
	Annotations map[string]string `json:"annotations"`
	Labels      map[string]string `json:"labels"`
	Taints      []corev1.Taint    `json:"taints"`
}

func (a Applied) encode() string {
	if a.Annotations == nil {
		a.Annotations = map[string]string{}
	}
	if a.Labels == nil {
		a.Labels = map[string]string{}
	}
	if a.Taints == nil {
		a.Taints = []corev1.Taint{}
	}
	// Marshalling maps of strings and taints without times cannot fail;
	// encoding/json sorts map keys, so equal contents give equal strings.
	b, _ := json.Marshal(a)
	return string(b)
}

// LastApplied decodes the node's last-applied annotation. A node without
// one was never touched by us: the zero Applied, so nothing is removed.
func LastApplied(n *corev1.Node) (Applied, error) {
	s, ok := n.Annotations[deckhousev1.LastAppliedNodeTemplateAnnotation]
	if !ok || s == "" {
		return Applied{}, nil
	}
	var a Applied
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return Applied{}, fmt.Errorf("annotation %s of node %s is not valid JSON: %w", deckhousev1.LastAppliedNodeTemplateAnnotation, n.Name, err)
	}
	return a, nil
}

// Desired is what the group wants on the node: its template without the
// skipped entries (see Skipped), plus the type and role labels and, for nodes no
// autoscaler owns, the scale-down-disabled annotation.
func Desired(ng *deckhousev1.NodeGroup) Applied {
	d := Applied{
		Labels: map[string]string{
			deckhousev1.NodeTypeLabel:                 string(ng.Spec.NodeType),
			deckhousev1.NodeRoleLabelPrefix + ng.Name: "",
		},
		Annotations: map[string]string{},
	}
	if ng.Name == deckhousev1.MasterNodeGroup {
		d.Labels[deckhousev1.ControlPlaneRoleLabel] = ""
	}
	if ng.Spec.NodeType != deckhousev1.NodeTypeCloudEphemeral {
		d.Annotations[deckhousev1.ScaleDownDisabledAnnotation] = "true"
	}
	t := ng.Spec.NodeTemplate
	if t == nil {
		return d
	}
	for k, v := range t.Labels {
		if skipReason(k, &v) == "" {
			d.Labels[k] = v
		}
	}
	for k, v := range t.Annotations {
		if skipReason(k, nil) == "" {
			d.Annotations[k] = v
		}
	}
	for _, tt := range t.Taints {
		if skipReason(tt.Key, &tt.Value) != "" {
			continue
		}
		taint := corev1.Taint{Key: tt.Key, Value: tt.Value, Effect: corev1.TaintEffect(tt.Effect)}
		// A node may carry one taint per key and effect; the later entry wins.
		if i := slices.IndexFunc(d.Taints, func(x corev1.Taint) bool { return sameTaint(x, taint) }); i >= 0 {
			d.Taints[i] = taint
		} else {
			d.Taints = append(d.Taints, taint)
		}
	}
	return d
}

// Result is the outcome of Compute for one node.
type Result struct {
	// Change is what to patch; empty when the node is up to date.
	Change *nodes.Change
	// LastAppliedErr is set when the node's last-applied annotation could
	// not be read; the merge then removes nothing (as on a first apply)
	// and the annotation is rewritten.
	LastAppliedErr error
}

// Compute returns the change that brings node n in line with its group ng.
// ng is nil when the node has no group or its group does not exist: such
// nodes are left alone. It never removes a key that the last-applied
// annotation does not name, so the first apply keeps every existing key.
func Compute(n *corev1.Node, ng *deckhousev1.NodeGroup) Result {
	change := &nodes.Change{}
	if ng == nil {
		return Result{Change: change}
	}
	// Machines of an ephemeral group got their template from the machine
	// controller that made them; only the registration taint is ours.
	if ng.Spec.NodeType == deckhousev1.NodeTypeCloudEphemeral && !nodes.Has(n, deckhousev1.MachineAnnotation) {
		if taints, changed := withoutUninitialized(n.Spec.Taints); changed {
			change.Taints = &taints
		}
		return Result{Change: change}
	}

	last, err := LastApplied(n)
	want := Desired(ng)

	change.Labels = mergeMap(n.Labels, last.Labels, want.Labels)
	change.Annotations = mergeMap(n.Annotations, last.Annotations, want.Annotations)
	if enc := want.encode(); n.Annotations[deckhousev1.LastAppliedNodeTemplateAnnotation] != enc {
		if change.Annotations == nil {
			change.Annotations = map[string]*string{}
		}
		change.Annotations[deckhousev1.LastAppliedNodeTemplateAnnotation] = &enc
	}
	taints, changed := mergeTaints(n.Spec.Taints, last.Taints, want.Taints)
	if t, removed := withoutUninitialized(taints); removed {
		taints, changed = t, true
	}
	if changed {
		change.Taints = &taints
	}
	return Result{Change: change, LastAppliedErr: err}
}

// mergeMap returns the label or annotation changes: keys we applied before
// and no longer want are removed, wanted keys are set where they differ,
// anything else is left as it is. Nil when nothing changes.
func mergeMap(actual, last, want map[string]string) map[string]*string {
	var out map[string]*string
	put := func(k string, v *string) {
		if out == nil {
			out = map[string]*string{}
		}
		out[k] = v
	}
	for k := range last {
		if _, keep := want[k]; keep {
			continue
		}
		if _, present := actual[k]; present {
			put(k, nil)
		}
	}
	for k, v := range want {
		if cur, ok := actual[k]; !ok || cur != v {
			put(k, &v)
		}
	}
	return out
}

// sameTaint says whether two taints are the same taint: a node holds at
// most one taint per key and effect, and the value is what may change.
func sameTaint(a, b corev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect }

// mergeTaints keeps the node's taints in their order, drops those we
// applied before and no longer want, updates the values of wanted ones and
// appends wanted ones that are missing. It reports whether anything changed.
func mergeTaints(actual, last, want []corev1.Taint) ([]corev1.Taint, bool) {
	out := make([]corev1.Taint, 0, len(actual)+len(want))
	changed := false
	for _, t := range actual {
		wanted := slices.ContainsFunc(want, func(w corev1.Taint) bool { return sameTaint(t, w) })
		applied := slices.ContainsFunc(last, func(l corev1.Taint) bool { return sameTaint(t, l) })
		if applied && !wanted {
			changed = true
			continue
		}
		out = append(out, t)
	}
	for _, w := range want {
		i := slices.IndexFunc(out, func(t corev1.Taint) bool { return sameTaint(t, w) })
		switch {
		case i < 0:
			out = append(out, w)
			changed = true
		case out[i].Value != w.Value:
			// Keep the node's TimeAdded: the taint is the same one.
			out[i].Value = w.Value
			changed = true
		}
	}
	return out, changed
}

// withoutUninitialized drops node-manager's registration taint, whatever
// its effect (a differing effect once kept it in Deckhouse).
func withoutUninitialized(taints []corev1.Taint) ([]corev1.Taint, bool) {
	out := slices.DeleteFunc(slices.Clone(taints), func(t corev1.Taint) bool { return t.Key == deckhousev1.UninitializedTaint })
	if out == nil {
		out = []corev1.Taint{}
	}
	return out, len(out) != len(taints)
}
