// Package preview answers what a proposed NodeGroup or
// NodeGroupConfiguration would change on nodes before it is applied: which
// groups change, the unified diff of every changed step, the new checksum,
// whether the change is disruptive, and which nodes take it.
//
// A proposal is rendered by the renderer that renders every group
// (bundles.Renderer, over the same template tree and the same bounded
// render workers), from the cluster state the bundle controller holds with
// the proposal put in place of (or beside) the object it changes. What it
// is compared with is what the group's nodes receive now: the published
// bundle. So a preview says exactly what applying the change would do, and
// a proposal that does not render is refused the way a render failure is
// reported (template, line, message).
//
// Two callers share it: the validating admission webhook (package
// admission: warnings at `kubectl apply`, a refusal of a configuration
// that does not render) and the nodegroupbundlepreviews resource (package
// registry: the full diff on demand). The classification is
// templates.StepDisruption, the product's one definition of a disruptive
// step change.
package preview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/apiserver/preview/linediff"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

// Inputs is the cluster state groups render from now, and each group's
// latest render from it (bundles.Controller).
type Inputs interface {
	Snapshot() (bundles.Inputs, error)
	// Rendered is the group's latest render, nil when it has none.
	Rendered(group string) *bundles.Result
}

// Published is what each group's nodes receive now (bundles.Store).
type Published interface {
	Get(group string) (*bundles.Published, bool)
}

// Nodes lists the nodes of every group.
type Nodes interface {
	// ByGroup maps each group to its nodes' names, sorted.
	ByGroup(ctx context.Context) (map[string][]string, error)
}

// Proposal is a change to preview: a NodeGroup, a NodeGroupConfiguration,
// or both (created or changed; their names say which object they
// replace).
type Proposal struct {
	NodeGroup *deckhousev1.NodeGroup
	Config    *deckhousev1alpha1.NodeGroupConfiguration
	// StepsOnly asks for which steps change and how (added, removed,
	// modified, disruptive), without their diffs or the groups' new
	// checksums: what the admission webhook's warnings say. It spares
	// hashing every script of every group the proposal touches, most of
	// the cost of a configuration that selects every group.
	StepsOnly bool
}

// Result is what a proposal changes.
type Result struct {
	// Groups are the groups whose nodes would receive something else, by
	// name; a group the proposal does not change is not here.
	Groups []GroupChange
	// Failures are the groups that would not render with the proposal.
	Failures []GroupFailure
	// Composed are the groups whose render was composed from their
	// current render (only the proposal's NodeGroupConfiguration rendered);
	// Rendered, those rendered whole (see Previewer.Preview).
	Composed, Rendered int
}

// GroupChange is what one group's nodes would receive.
type GroupChange = bashiblev1alpha1.GroupPreview

// GroupFailure is a group that would not render.
type GroupFailure struct {
	Group string
	// Config is the NodeGroupConfiguration at fault, empty for anything
	// else (a built-in template, the NodeGroup, the cluster settings).
	Config string
	// Message names the template, the line and what failed.
	Message string
}

// ProposalFailures are the failures the proposal's own
// NodeGroupConfiguration causes: the reason to refuse it.
func (r *Result) ProposalFailures(p Proposal) []GroupFailure {
	if p.Config == nil {
		return nil
	}
	var out []GroupFailure
	for _, f := range r.Failures {
		if f.Config == p.Config.Name {
			out = append(out, f)
		}
	}
	return out
}

// Previewer computes previews. At most one runs at a time: a preview
// renders untrusted templates in the server's bounded render workers,
// and a burst of previews must leave them to the groups' own renders.
type Previewer struct {
	renderer  *bundles.Renderer
	inputs    Inputs
	published Published
	nodes     Nodes
	running   chan struct{}
}

// New returns a previewer that renders with a tree of its own: give it
// the server's sandboxed tree, so that proposals render under the same
// bounds as every NodeGroupConfiguration. Its render cache is its own, so
// previews never touch what the bundle controller reuses.
func New(tree *templates.Tree, inputs Inputs, published Published, nodes Nodes) *Previewer {
	return &Previewer{renderer: bundles.NewRenderer(tree), inputs: inputs, published: published, nodes: nodes,
		running: make(chan struct{}, 1)}
}

// ErrBusy is returned when ctx ends while another preview runs.
var ErrBusy = errors.New("another preview is rendering; try again")

// Preview renders the groups p may change and compares each with what
// its nodes receive now.
//
// A group is rendered whole only when it must be. When the group's latest
// render (by the bundle controller) succeeded under the render context
// the group has now, the proposal's render is composed from it
// (bundles.Renderer.Compose): only the NodeGroupConfigurations that
// differ from those it rendered with (the proposal's, and any changed
// since that the controller has not rendered yet) are rendered, in the
// sandbox under the same bounds, and the built-in steps and the other
// configurations' steps are taken from that render, which gives the same
// bundle, checksum and failures as a whole render. So a configuration
// selecting every group costs one step's render per group. A proposed
// NodeGroup changes its group's render context, and a group whose latest
// render failed or was under another context (cluster settings, the
// NodeGroup, the CA changed since) has nothing to compose from: those
// render whole, as before.
func (pv *Previewer) Preview(ctx context.Context, p Proposal) (*Result, error) {
	if p.NodeGroup == nil && p.Config == nil {
		return nil, errors.New("nothing to preview: give a NodeGroup, a NodeGroupConfiguration or both")
	}
	select {
	case pv.running <- struct{}{}:
		defer func() { <-pv.running }()
	case <-ctx.Done():
		return nil, ErrBusy
	}
	in, err := pv.inputs.Snapshot()
	if err != nil {
		return nil, err
	}
	current := in
	in = apply(in, p)
	groups := affected(current, in, p)
	if len(groups) == 0 {
		return &Result{}, nil
	}
	nodes, err := pv.nodes.ByGroup(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the nodes of the groups: %w", err)
	}
	res := &Result{}
	for _, ng := range groups {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("preview stopped before group %s: %w", ng.Name, err)
		}
		compose := pv.renderer.Compose
		if p.StepsOnly {
			compose = pv.renderer.ComposeSteps
		}
		r, composed := compose(ng, in, pv.inputs.Rendered(ng.Name))
		if composed {
			res.Composed++
		} else {
			r = pv.renderer.Render(ng, in)
			res.Rendered++
		}
		if r.Published == nil {
			for _, f := range r.Failures {
				res.Failures = append(res.Failures, GroupFailure{Group: ng.Name, Config: f.Custom, Message: f.Err.Error()})
			}
			continue
		}
		var before *bundles.Published
		if b, ok := pv.published.Get(ng.Name); ok {
			before = b
		}
		if change, changed := compare(before, r.Published, !p.StepsOnly); changed {
			change.Nodes = nodes[ng.Name]
			change.NodeCount = int32(len(change.Nodes))
			change.ApprovalMode = approvalMode(ng)
			res.Groups = append(res.Groups, change)
		}
	}
	return res, nil
}

// apply is in with p in place of the objects it replaces.
func apply(in bundles.Inputs, p Proposal) bundles.Inputs {
	out := in
	if p.NodeGroup != nil {
		out.NodeGroups = replace(in.NodeGroups, p.NodeGroup)
	}
	if p.Config != nil {
		out.Configs = replace(in.Configs, p.Config)
	}
	return out
}

func replace[T metav1.Object](list []T, obj T) []T {
	out := make([]T, 0, len(list)+1)
	for _, o := range list {
		if o.GetName() != obj.GetName() {
			out = append(out, o)
		}
	}
	return append(out, obj)
}

// affected are the groups of next (by name) whose render p may change: a
// NodeGroup its own group; a NodeGroupConfiguration the groups it
// selects, before and after the change.
func affected(current, next bundles.Inputs, p Proposal) []*deckhousev1.NodeGroup {
	want := map[string]bool{}
	if p.NodeGroup != nil {
		want[p.NodeGroup.Name] = true
	}
	if p.Config != nil {
		selects := func(c *deckhousev1alpha1.NodeGroupConfiguration, group string) bool {
			return slices.Contains(c.Spec.NodeGroups, "*") || slices.Contains(c.Spec.NodeGroups, group)
		}
		var old *deckhousev1alpha1.NodeGroupConfiguration
		for _, c := range current.Configs {
			if c.Name == p.Config.Name {
				old = c
			}
		}
		for _, ng := range next.NodeGroups {
			if selects(p.Config, ng.Name) || (old != nil && selects(old, ng.Name)) {
				want[ng.Name] = true
			}
		}
	}
	var out []*deckhousev1.NodeGroup
	for _, ng := range next.NodeGroups {
		if want[ng.Name] {
			out = append(out, ng)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// compare is what changes from before (nil for a group not published
// yet) to after, and whether anything does; with diffs, each changed
// step's unified diff. after's checksum may be empty (composed without
// it): then the steps themselves say whether anything changes.
func compare(before, after *bundles.Published, diffs bool) (GroupChange, bool) {
	// A group's first bundle disrupts nothing: a node's first run passes
	// every disruption gate (bb-disruption-gate), there being no workload
	// yet.
	first := before == nil
	if first {
		before = &bundles.Published{}
	}
	change := GroupChange{Group: after.Group, Checksum: after.Checksum, PreviousChecksum: before.Checksum}
	if after.Checksum != "" && before.Checksum == after.Checksum {
		return change, false
	}
	// Only the steps that differ are named: most of a group's steps are
	// the same strings on both sides.
	var steps []string
	for n, a := range after.Steps {
		if b, had := before.Steps[n]; !had || a != b {
			steps = append(steps, n)
		}
	}
	for n := range before.Steps {
		if _, has := after.Steps[n]; !has {
			steps = append(steps, n)
		}
	}
	sort.Strings(steps)
	// bashible.sh, the agent itself, is part of what nodes receive and of
	// the checksum; it is shown first, like a step.
	files := append([]string{bashiblev1alpha1.BashibleScriptKey}, steps...)
	for _, name := range files {
		old, new := before.Steps[name], after.Steps[name]
		_, hadOld := before.Steps[name]
		_, hasNew := after.Steps[name]
		if name == bashiblev1alpha1.BashibleScriptKey {
			old, new, hadOld, hasNew = before.Bashible.String(), after.Bashible.String(), before.Bashible.Len() != 0, true
		}
		if old == new && hadOld == hasNew {
			continue
		}
		step := bashiblev1alpha1.StepPreview{Name: name}
		if diffs {
			step.Diff = linediff.Unified("a/"+name, "b/"+name, old, new)
		}
		switch {
		case !hadOld:
			step.Change = bashiblev1alpha1.StepAdded
		case !hasNew:
			step.Change = bashiblev1alpha1.StepRemoved
		default:
			step.Change = bashiblev1alpha1.StepModified
		}
		if hasNew && !first {
			step.Disruption = templates.StepDisruption(name, new)
		}
		if len(step.Disruption) > 0 {
			change.Disruptive = true
		}
		change.Steps = append(change.Steps, step)
	}
	return change, after.Checksum != "" || first || len(change.Steps) > 0
}

// approvalMode is how the group's disruptions are approved, which says
// what a disruptive change does to its nodes.
func approvalMode(ng *deckhousev1.NodeGroup) string {
	if d := ng.Spec.Disruptions; d != nil && d.ApprovalMode != "" {
		return string(d.ApprovalMode)
	}
	return string(deckhousev1.ApprovalAutomatic)
}

// InstanceNodes lists nodes by their Instances, whose
// node.deckhouse.io/group label only node-manager writes (the same source
// as the access narrowing): a node's own labels are the kubelet's to
// write. It reads them from an informer's cache (the Narrower's, which
// keeps each Instance's labels): a preview runs at every write of a
// NodeGroup or NodeGroupConfiguration, and a LIST of every Instance each
// time cost kube-apiserver a quorum read of the whole fleet.
type InstanceNodes struct {
	Lister nmlisters.InstanceLister
	// Synced reports whether the cache is loaded; until it is, a preview
	// fails (and the webhook admits the change with a warning saying so)
	// rather than count no nodes.
	Synced func() bool
}

// ByGroup maps each group to its nodes from the cache.
func (n InstanceNodes) ByGroup(context.Context) (map[string][]string, error) {
	if n.Synced != nil && !n.Synced() {
		return nil, errors.New("the Instances are not loaded yet")
	}
	list, err := n.Lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, inst := range list {
		if g := inst.Labels[deckhousev1.NodeGroupLabel]; g != "" {
			out[g] = append(out[g], inst.Name)
		}
	}
	for g := range out {
		sort.Strings(out[g])
	}
	return out, nil
}

// defaultWeight is a NodeGroupConfiguration's weight when none is given
// (the CRD's default).
const defaultWeight = 100

// DefaultConfig gives a proposed NodeGroupConfiguration that was not
// admitted by the API (a preview object's) the defaults the API would
// give it, so that it renders to the step it would be: weight 100 unless
// weightSet, every group and every bundle when none is named.
func DefaultConfig(c *deckhousev1alpha1.NodeGroupConfiguration, weightSet bool) {
	if !weightSet {
		c.Spec.Weight = defaultWeight
	}
	if len(c.Spec.NodeGroups) == 0 {
		c.Spec.NodeGroups = []string{"*"}
	}
	if len(c.Spec.Bundles) == 0 {
		c.Spec.Bundles = []string{"*"}
	}
}
