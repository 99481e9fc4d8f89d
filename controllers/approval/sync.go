package approval

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// sync applies Plan to one group: it writes every change, the approvals
// and disruptions last, records the decision's events, and queues the
// group again when the plan is due to be looked at.
func (c *Controller) sync(ctx context.Context, group string) error {
	g, err := c.watch.Groups.Get(group)
	if apierrors.IsNotFound(err) {
		c.metrics.forget(group)
		return nil
	}
	if err != nil {
		return err
	}
	ns, err := c.d.Nodes.InGroup(group)
	if err != nil {
		return err
	}
	checksum := c.watch.Checksum(group)
	if checksum == "" {
		klog.FromContext(ctx).V(2).Info("No bundle for the group yet; nothing to approve", "group", group)
		return nil
	}
	in := Input{Group: g, Checksum: checksum, Nodes: ns, Now: c.d.Clock.Now(), ControllerNode: c.opts.NodeName}
	if Gated(g) {
		in.Rollout = ParseRollout(g)
		_, in.Resume = g.Annotations[deckhousev1.ResumeRolloutAnnotation]
		if in.Instances, err = c.groupInstances(group); err != nil {
			return err
		}
	}
	d := Plan(in)
	if grants(d) && c.listed.mustList(group, c.d.Nodes) {
		listed, err := c.listMembers(ctx, group, ns)
		if err != nil {
			return err
		}
		c.listed.set(group, sameSlots(listed, ns))
		ns = listed
		in.Nodes, in.Now = ns, c.d.Clock.Now()
		d = Plan(in)
	}
	// The rollout's record goes first: a batch is recorded before its
	// approvals are written, and a halt before anything else happens.
	if err := c.keepRollout(ctx, g, checksum, d); err != nil {
		return err
	}
	byName := map[string]*corev1.Node{}
	for _, n := range ns {
		byName[n.Name] = n
	}
	// Approvals and disruptions are granted only after every other change
	// landed: a slot freed by a finished node must really be free (its
	// patch may fail) before another node takes it, so maxConcurrent holds
	// at every moment.
	var others, grants []string
	for _, name := range slices.Sorted(maps.Keys(d.Changes)) {
		if isGrant(d.Changes[name]) {
			grants = append(grants, name)
		} else {
			others = append(others, name)
		}
	}
	// A conflict means the node changed under us: decide again on the new
	// state rather than writing this one.
	written, errs := c.patchAll(ctx, group, others, byName, d.Changes, "Updated node for its update")
	if len(errs) == 0 {
		var granted map[string]bool
		granted, errs = c.patchAll(ctx, group, grants, byName, d.Changes, "Granted an update slot")
		maps.Copy(written, granted)
	}
	for _, e := range d.Events {
		if n := byName[e.Node]; n != nil && written[e.Node] {
			c.d.Recorder.Eventf(n, groupRef(g), e.Type, e.Reason, "Update", "%s", e.Message)
		}
	}
	if !d.RecheckAt.IsZero() {
		c.queue.AddAfter(group, d.RecheckAt.Sub(c.d.Clock.Now()))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("group %s: %w", group, err)
	}
	return nil
}

// listMembers reads the group's nodes (members: the view's, by their
// Instances) from the API: one LIST by the group's label, of which only
// the members count (a node that labelled itself into the group is not
// one), and a GET of each member the LIST missed (a member that labelled
// itself out of it is still one).
func (c *Controller) listMembers(ctx context.Context, group string, members []*corev1.Node) ([]*corev1.Node, error) {
	list, err := c.d.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the nodes of group %s before approving: %w", group, err)
	}
	want := make(map[string]bool, len(members))
	for _, n := range members {
		want[n.Name] = true
	}
	listed := make([]*corev1.Node, 0, len(members))
	for i := range list.Items {
		if n := &list.Items[i]; want[n.Name] {
			listed = append(listed, n)
			delete(want, n.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		n, err := c.d.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading node %s of group %s before approving: %w", name, group, err)
		}
		listed = append(listed, n)
	}
	return listed, nil
}

// patchConcurrency is how many node writes one sync makes at once. A
// finished batch frees its slots and a new batch takes them in one sync;
// written one after another, a batch of a hundred nodes took a round trip
// each on the way out and again on the way in.
const patchConcurrency = 16

// patchAll writes the changes of names, patchConcurrency at a time, and
// says which were written and what failed.
func (c *Controller) patchAll(ctx context.Context, group string, names []string, byName map[string]*corev1.Node, changes map[string]*nodes.Change, msg string) (map[string]bool, []error) {
	var mu sync.Mutex
	var errs []error
	written := map[string]bool{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, patchConcurrency)
	for _, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := nodes.Patch(ctx, c.d.Kube, c.d.Nodes, byName[name], changes[name])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			written[name] = true
			klog.FromContext(ctx).Info(msg, "group", group, "node", name, "change", changes[name].String())
		})
	}
	wg.Wait()
	return written, errs
}

func groupRef(g *deckhousev1.NodeGroup) *deckhousev1.NodeGroup {
	ref := g.DeepCopy()
	ref.APIVersion, ref.Kind = deckhousev1.SchemeGroupVersion.String(), "NodeGroup"
	return ref
}

func grants(d Decision) bool {
	for _, ch := range d.Changes {
		if isGrant(ch) {
			return true
		}
	}
	return false
}

// isGrant reports whether the change takes one of the slots maxConcurrent
// limits: an update approval, or a disruption (a drain by node-manager, a
// disruption approval, a replacement mark).
func isGrant(ch *nodes.Change) bool {
	for _, k := range slotAnnotations {
		if v, ok := ch.Annotations[k]; ok && v != nil {
			return true
		}
	}
	return false
}

// slotAnnotations are the annotations that take a slot maxConcurrent limits.
var slotAnnotations = []string{deckhousev1.ApprovedAnnotation, deckhousev1.DrainingAnnotation, deckhousev1.DisruptionApprovedAnnotation, deckhousev1.RollingUpdateAnnotation}

// sameSlots reports whether the API's nodes (a LIST) and the informer's
// view hold the same nodes with the same slot annotations, at resource
// versions nodes.Cache can compare: only then may the view stand in for
// a LIST later. A difference is a grant the informer has not delivered
// (a previous leader's, a person's) or a write of ours on its way.
func sameSlots(api, view []*corev1.Node) bool {
	if len(api) != len(view) {
		return false
	}
	byName := make(map[string]*corev1.Node, len(view))
	for _, n := range view {
		byName[n.Name] = n
	}
	for _, a := range api {
		v := byName[a.Name]
		if v == nil || !nodes.ComparableVersion(a.ResourceVersion) {
			return false
		}
		for _, k := range slotAnnotations {
			av, aok := a.Annotations[k]
			vv, vok := v.Annotations[k]
			if aok != vok || av != vv {
				return false
			}
		}
	}
	return true
}

// informerLagLimit is how long the informer may take to deliver a write of
// ours before grants are decided on a LIST again.
const informerLagLimit = 5 * time.Second

// listedGroups decides when a grant needs the API's own view of a group's
// nodes. Approvals and disruptions are what maxConcurrent limits, and the
// informer's view, even with our own writes (nodes.Cache), can miss grants
// made elsewhere: a previous leader's, made before this term started, or a
// person's, while the watch lags. So a group's grants are decided on a
// LIST until one LIST has shown the same slots as the informer (sameSlots:
// the informer had caught up), and again whenever the informer is behind a
// write of ours by more than informerLagLimit (a lagging or stopped watch).
// Otherwise the view is current to within the informer's delivery time: a
// grant made elsewhere in that time can be missed, as one made between a
// LIST and the write it decides could be; that LIST (tens of milliseconds
// a batch, more in a large group) is skipped.
type listedGroups struct {
	mu sync.Mutex
	// current: the group's last LIST showed what the informer showed.
	current map[string]bool
}

func (l *listedGroups) mustList(group string, view *nodes.Cache) bool {
	l.mu.Lock()
	current := l.current[group]
	l.mu.Unlock()
	return !current || view.Behind(informerLagLimit)
}

func (l *listedGroups) set(group string, current bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil {
		l.current = map[string]bool{}
	}
	l.current[group] = current
}
