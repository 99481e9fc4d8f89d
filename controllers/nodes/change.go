package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Change is what a controller wants changed on one Node: annotations and
// labels to set (a nil value removes the key), cordon state and taints.
// The same Change is applied to the API (Patch) and, in tests and
// simulations, to an in-memory Node (ApplyTo), so both see one behaviour.
type Change struct {
	Annotations   map[string]*string
	Labels        map[string]*string
	Unschedulable *bool
	// Taints, when not nil, replaces the node's taints.
	Taints *[]corev1.Taint
}

// Set records that key is to be set to value.
func (c *Change) Set(key, value string) *Change {
	if c.Annotations == nil {
		c.Annotations = map[string]*string{}
	}
	c.Annotations[key] = &value
	return c
}

// Remove records that key is to be removed (if present on node).
func (c *Change) Remove(n *corev1.Node, keys ...string) *Change {
	for _, k := range keys {
		if !Has(n, k) {
			continue
		}
		if c.Annotations == nil {
			c.Annotations = map[string]*string{}
		}
		c.Annotations[k] = nil
	}
	return c
}

// SetUnschedulable records the cordon state.
func (c *Change) SetUnschedulable(v bool) *Change {
	c.Unschedulable = &v
	return c
}

// Empty reports whether the change would do nothing.
func (c *Change) Empty() bool {
	return c == nil || (len(c.Annotations) == 0 && len(c.Labels) == 0 && c.Unschedulable == nil && c.Taints == nil)
}

// Merge folds other into c; other wins on the same key.
func (c *Change) Merge(other *Change) {
	if other == nil {
		return
	}
	if len(other.Annotations) > 0 && c.Annotations == nil {
		c.Annotations = map[string]*string{}
	}
	maps.Copy(c.Annotations, other.Annotations)
	if len(other.Labels) > 0 && c.Labels == nil {
		c.Labels = map[string]*string{}
	}
	maps.Copy(c.Labels, other.Labels)
	if other.Unschedulable != nil {
		c.Unschedulable = other.Unschedulable
	}
	if other.Taints != nil {
		c.Taints = other.Taints
	}
}

// String describes the change for logs and events (no values of secrets
// ever travel through node annotations, so values are printed).
func (c *Change) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.Annotations)) {
		if v := c.Annotations[k]; v == nil {
			parts = append(parts, "-"+k)
		} else {
			parts = append(parts, "+"+k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		if c.Labels[k] == nil {
			parts = append(parts, "-label "+k)
		} else {
			parts = append(parts, "+label "+k)
		}
	}
	if c.Unschedulable != nil {
		if *c.Unschedulable {
			parts = append(parts, "cordon")
		} else {
			parts = append(parts, "uncordon")
		}
	}
	if c.Taints != nil {
		parts = append(parts, fmt.Sprintf("taints=%d", len(*c.Taints)))
	}
	return strings.Join(parts, " ")
}

// ApplyTo applies the change to an in-memory copy of a Node.
func (c *Change) ApplyTo(n *corev1.Node) {
	apply := func(m map[string]string, ch map[string]*string) map[string]string {
		if len(ch) == 0 {
			return m
		}
		if m == nil {
			m = map[string]string{}
		}
		for k, v := range ch {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = *v
			}
		}
		return m
	}
	n.Annotations = apply(n.Annotations, c.Annotations)
	n.Labels = apply(n.Labels, c.Labels)
	if c.Unschedulable != nil {
		n.Spec.Unschedulable = *c.Unschedulable
	}
	if c.Taints != nil {
		n.Spec.Taints = slices.Clone(*c.Taints)
	}
}

// patch is the JSON merge patch for the change, guarded by the Node's
// resourceVersion: a Node someone else changed since we read it makes the
// patch fail with a Conflict instead of acting on stale state.
func (c *Change) patch(resourceVersion string) ([]byte, error) {
	meta := map[string]any{"resourceVersion": resourceVersion}
	if len(c.Annotations) > 0 {
		meta["annotations"] = c.Annotations
	}
	if len(c.Labels) > 0 {
		meta["labels"] = c.Labels
	}
	p := map[string]any{"metadata": meta}
	spec := map[string]any{}
	if c.Unschedulable != nil {
		if *c.Unschedulable {
			spec["unschedulable"] = true
		} else {
			spec["unschedulable"] = nil
		}
	}
	if c.Taints != nil {
		if len(*c.Taints) == 0 {
			spec["taints"] = nil
		} else {
			spec["taints"] = *c.Taints
		}
	}
	if len(spec) > 0 {
		p["spec"] = spec
	}
	return json.Marshal(p)
}

// Patch writes the change to the Node read at n.ResourceVersion and records
// the result in the cache, so the next decision sees it even before the
// informer does.
func Patch(ctx context.Context, client kubernetes.Interface, cache *Cache, n *corev1.Node, c *Change) (*corev1.Node, error) {
	if c.Empty() {
		return n, nil
	}
	body, err := c.patch(n.ResourceVersion)
	if err != nil {
		return nil, fmt.Errorf("encoding the patch of node %s: %w", n.Name, err)
	}
	out, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: deckhousev1.NodeManagerControllerName})
	if err != nil {
		return nil, fmt.Errorf("patching node %s (%s): %w", n.Name, c, err)
	}
	if cache != nil {
		cache.Wrote(out)
	}
	return out, nil
}
