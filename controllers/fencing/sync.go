package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
	applyv1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1"
)

// ConditionFencingHeld is the NodeGroup condition of a fenced group: True
// while fencing of its dead nodes is held back (the reason says why:
// UnsafeTiming, StaleAPIView, ClusterOutage, GroupQuorumLost,
// BlastRadiusCap), False
// (FencingActive) while dead nodes are fenced as they come.
const ConditionFencingHeld = "FencingHeld"

// maintenance are the annotations that exempt a node, as the agent reads them.
var maintenance = []string{deckhousev1.ApprovedAnnotation, deckhousev1.DisruptionApprovedAnnotation, deckhousev1.FencingDisableAnnotation}

// sync decides over the whole cluster and carries the plan out: it fences
// the nodes the plan fences, reports every decision once, applies the
// groups' FencingHeld conditions and sets the metrics.
func (c *Controller) sync(ctx context.Context, _ string) error {
	facts, revived, err := c.facts()
	if err != nil {
		return err
	}
	plan := Decide(facts)
	c.rememberHolds(facts, plan)
	var errs []error
	for _, n := range revived {
		// The Lease was renewed since the node was fenced: it is back.
		if _, err := nodes.Patch(ctx, c.d.Kube, c.d.Nodes, n, (&nodes.Change{}).Remove(n, deckhousev1.FencedAnnotation)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, d := range plan.Decisions {
		if d.Verdict == Fence {
			if err := c.fence(ctx, d); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		c.report(ctx, d)
	}
	c.forgetReports(plan)
	c.metrics.guard(plan.Guard)
	for group, h := range plan.Groups {
		c.metrics.held(group, h)
		if err := c.applyHeld(ctx, group, h); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.clearGone(ctx, plan); err != nil {
		errs = append(errs, err)
	}
	next := recheck
	if plan.Next > 0 && plan.Next < next {
		next = plan.Next
	}
	c.queue.AddAfter(key, next)
	return errors.Join(errs...)
}

// feedingHolds are the reasons a group is held while its nodes' agents
// may keep their watchdogs fed: a majority of the group, or of the
// cluster, silent together, or a controller that cannot see renewals.
var feedingHolds = []string{ReasonGroupQuorumLost, ReasonClusterOutage, ReasonStaleAPIView}

// rememberHolds records, for every node of a group the plan holds for a
// feeding reason, that it was held now (Node.HeldUntil), and forgets the
// nodes that are gone.
func (c *Controller) rememberHolds(f Facts, p Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	heldAt := map[string]time.Time{}
	for _, n := range f.Nodes {
		if h := p.Groups[n.Group]; h.Held && slices.Contains(feedingHolds, h.Reason) {
			heldAt[n.Name] = f.Now
		} else if at, ok := c.heldAt[n.Name]; ok {
			heldAt[n.Name] = at
		}
	}
	c.heldAt = heldAt
}

// facts gathers what Decide needs from the caches, and the kept nodes
// whose fenced annotation is out of date (their Lease was renewed since).
func (c *Controller) facts() (Facts, []*corev1.Node, error) {
	now := c.d.Clock.Now()
	o := c.opts
	f := Facts{
		Now:    now,
		Groups: map[string]Group{},
		Timing: Timing{Margin: o.Margin, AgentAPITimeout: o.AgentAPITimeout, AgentFeedInterval: o.AgentFeedInterval, LeaseRenewInterval: o.LeaseRenewInterval},
		Limits: o.Limits,
	}
	groups, err := c.groups.List(labels.Everything())
	if err != nil {
		return f, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range groups {
		members, err := c.d.Nodes.InGroup(g.Name)
		if err != nil {
			return f, nil, err
		}
		recent := map[string]time.Time{}
		for name, at := range c.recent[g.Name] {
			if now.Sub(at) < o.Interval {
				recent[name] = at
			}
		}
		c.recent[g.Name] = recent
		f.Groups[g.Name] = Group{Name: g.Name, Fencing: g.Spec.Fencing, NodeType: g.Spec.NodeType, Size: len(members), Recent: recent}
	}
	for name := range c.recent {
		if _, ok := f.Groups[name]; !ok {
			delete(c.recent, name)
		}
	}
	f.LastRenewalSeen = c.lastSeen

	labelled, err := labels.NewRequirement(deckhousev1.FencingEnabledLabel, selection.Exists, nil)
	if err != nil {
		return f, nil, err
	}
	ns, err := c.d.Nodes.List(labels.NewSelector().Add(*labelled))
	if err != nil {
		return f, nil, err
	}
	var revived []*corev1.Node
	for _, n := range ns {
		fn := Node{Name: n.Name, Group: c.d.Nodes.GroupOf(n.Name), Type: deckhousev1.NodeType(n.Labels[deckhousev1.NodeTypeLabel])}
		g := f.Groups[fn.Group]
		if fn.Type == "" {
			fn.Type = g.NodeType
		}
		fn.Notify = n.Labels[deckhousev1.FencingModeLabel] == deckhousev1.FencingModeNotify ||
			(g.Fencing != nil && g.Fencing.Mode == deckhousev1.FencingModeNotify)
		for _, a := range maintenance {
			if nodes.Has(n, a) {
				fn.Maintenance = a
				break
			}
		}
		renewTime := ""
		if l, err := c.leases.Leases(corev1.NamespaceNodeLease).Get(n.Name); err == nil && l.Spec.RenewTime != nil {
			fn.HasLease = true
			renewTime = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
			fn.LastRenewal = l.Spec.RenewTime.Time
			// The later of the node's word and this controller's sight of
			// it: neither a node clock running behind nor a restart of the
			// controller makes a node look dead early.
			if s, ok := c.seen[n.Name]; ok && s.renewTime == renewTime && s.at.After(fn.LastRenewal) {
				fn.LastRenewal = s.at
			}
		}
		fn.HeldUntil = c.heldAt[n.Name]
		if v, ok := n.Annotations[deckhousev1.FencedAnnotation]; ok {
			if v == renewTime {
				fn.Fenced = true
			} else {
				revived = append(revived, n)
			}
		}
		if c.fenced[n.Name] != "" {
			if c.fenced[n.Name] == renewTime {
				fn.Fenced = true
			} else {
				delete(c.fenced, n.Name)
			}
		}
		f.Nodes = append(f.Nodes, fn)
	}
	return f, revived, nil
}

// fence frees a dead node: it checks with a fresh read that the Lease has
// not been renewed meanwhile, force-deletes the node's pods, then deletes
// its Node or marks it fenced, and reports it.
func (c *Controller) fence(ctx context.Context, d Decision) error {
	lease, err := c.d.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, d.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the Lease of node %s before fencing it: %w", d.Node, err)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.RenewTime.After(d.LastRenewal) {
		klog.FromContext(ctx).Info("Node renewed its Lease after all; not fencing it", "node", d.Node, "renewTime", lease.Spec.RenewTime)
		return nil
	}
	n, err := c.d.Nodes.Get(d.Node)
	if err != nil {
		return fmt.Errorf("reading node %s before fencing it: %w", d.Node, err)
	}
	c.mu.Lock()
	if c.recent[d.Group] == nil {
		c.recent[d.Group] = map[string]time.Time{}
	}
	if _, ok := c.recent[d.Group][d.Node]; !ok {
		c.recent[d.Group][d.Node] = c.d.Clock.Now()
	}
	c.mu.Unlock()

	pods, err := c.d.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", d.Node).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the pods of dead node %s to free them: %w", d.Node, err)
	}
	freeRWO := !d.Notify
	if g, err := c.groups.Get(d.Group); err == nil && g.Annotations[deckhousev1.FencingNotifyFreeReadWriteOnceAnnotation] == "true" {
		freeRWO = true
	}
	deleted := 0
	var kept []string
	for _, p := range pods.Items {
		if !freeRWO {
			claim, why, err := c.readWriteOnceClaim(ctx, &p)
			if err != nil {
				return fmt.Errorf("reading the volumes of pod %s/%s of dead Notify node %s before freeing it: %w", p.Namespace, p.Name, d.Node, err)
			}
			if claim != "" {
				kept = append(kept, fmt.Sprintf("%s/%s (PersistentVolumeClaim %s %s)", p.Namespace, p.Name, claim, why))
				continue
			}
		}
		err := c.d.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			return fmt.Errorf("force-deleting pod %s/%s of dead node %s: %w", p.Namespace, p.Name, d.Node, err)
		}
	}
	freed := c.d.Clock.Since(d.LastRenewal)
	if d.KeepNode {
		rt := lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		if _, err := nodes.Patch(ctx, c.d.Kube, c.d.Nodes, n, (&nodes.Change{}).Set(deckhousev1.FencedAnnotation, rt)); err != nil {
			return fmt.Errorf("marking kept node %s fenced: %w", d.Node, err)
		}
		c.mu.Lock()
		c.fenced[d.Node] = rt
		c.mu.Unlock()
	} else {
		err := c.d.Kube.CoreV1().Nodes().Delete(ctx, d.Node, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting dead node %s after freeing its pods: %w", d.Node, err)
		}
		c.d.Nodes.Forget(d.Node)
	}
	klog.FromContext(ctx).Info("Fenced a dead node", "node", d.Node, "group", d.Group, "podsDeleted", deleted, "nodeKept", d.KeepNode,
		"sinceLastRenewal", freed, "evacuationDelay", d.Delay)
	note := fmt.Sprintf("%s; %d pod(s) deleted %s after the last Lease renewal", d.Message, deleted, freed.Round(time.Millisecond))
	if len(kept) > 0 {
		klog.FromContext(ctx).Info("Kept the pods of a dead Notify node that use ReadWriteOnce volumes", "node", d.Node, "group", d.Group, "pods", kept)
		note += fmt.Sprintf("; %d pod(s) with ReadWriteOnce volumes kept: %s. Nothing resets a node in Notify mode, so they may still run there and "+
			"freeing them could run them twice; delete them once the node is known to be down, or annotate the group %s=true to free them",
			len(kept), strings.Join(kept, ", "), deckhousev1.FencingNotifyFreeReadWriteOnceAnnotation)
	}
	c.d.Recorder.Eventf(n, nil, corev1.EventTypeWarning, ReasonFenced, "Fence", "%s", note)
	if g, err := c.groups.Get(d.Group); err == nil {
		c.d.Recorder.Eventf(g, n, corev1.EventTypeWarning, ReasonFenced, "Fence", "%s", note)
	}
	c.metrics.Fenced.WithLabelValues(d.Group).Inc()
	c.mu.Lock()
	delete(c.reported, d.Node)
	c.mu.Unlock()
	return nil
}

// readWriteOnceClaim is the first PersistentVolumeClaim of p (its own, or
// the one of a generic ephemeral volume) that a single node may mount:
// access mode ReadWriteOnce or ReadWriteOncePod, with why; "" when it has
// none. A claim that is gone counts, as its access modes are unknown.
func (c *Controller) readWriteOnceClaim(ctx context.Context, p *corev1.Pod) (string, string, error) {
	for _, v := range p.Spec.Volumes {
		var claim string
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = p.Name + "-" + v.Name
		default:
			continue
		}
		pvc, err := c.d.Kube.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, claim, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return claim, "not found, its access modes unknown", nil
		case err != nil:
			return "", "", err
		}
		for _, m := range pvc.Spec.AccessModes {
			if m == corev1.ReadWriteOnce || m == corev1.ReadWriteOncePod {
				return claim, string(m), nil
			}
		}
	}
	return "", "", nil
}

// report records a skipped dead node once per reason: an Event on the
// Node and on its group, and node_manager_fencing_skipped_total.
func (c *Controller) report(ctx context.Context, d Decision) {
	c.mu.Lock()
	seen := c.reported[d.Node] == d.Group+"/"+d.Reason
	c.reported[d.Node] = d.Group + "/" + d.Reason
	c.mu.Unlock()
	if seen {
		return
	}
	klog.FromContext(ctx).Info("Not fencing a dead node", "node", d.Node, "group", d.Group, "reason", d.Reason, "sinceLastRenewal", d.Age, "message", d.Message)
	typ := corev1.EventTypeWarning
	if d.Reason == ReasonMaintenance {
		typ = corev1.EventTypeNormal
	}
	n, err := c.d.Nodes.Get(d.Node)
	if err != nil {
		return
	}
	c.d.Recorder.Eventf(n, nil, typ, ReasonSkipped, skipAction(d.Reason), "%s (%s)", d.Message, d.Reason)
	if g, err := c.groups.Get(d.Group); err == nil {
		c.d.Recorder.Eventf(g, n, typ, ReasonSkipped, skipAction(d.Reason), "%s (%s)", d.Message, d.Reason)
	}
	c.metrics.Skipped.WithLabelValues(d.Group, d.Reason).Inc()
}

// ReasonSkipped is the reason of the Event about a dead node left alone;
// its note ends with the reason of the decision.
const ReasonSkipped = "NodeFencingSkipped"

// skipAction is the action of a NodeFencingSkipped Event: Skip and the
// decision's reason (SkipNoLease, SkipStaleAPIView, ...). client-go's
// events/v1 recorder folds an Event into an earlier one with the same
// object, type, reason and action, but not note, seen in the last minutes:
// with one action for all reasons, a node first skipped for NoLease and
// then for StaleAPIView showed the NoLease note with a count of 2. With
// the reason in the action, each reason is its own Event.
func skipAction(reason string) string { return "Skip" + reason }

// forgetReports drops the reports of nodes the plan no longer skips (they
// are alive again, or gone), so a later skip is reported anew.
func (c *Controller) forgetReports(p Plan) {
	skipped := map[string]bool{}
	for _, d := range p.Decisions {
		skipped[d.Node] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.reported {
		if !skipped[n] {
			delete(c.reported, n)
		}
	}
}

// applyHeld applies the group's FencingHeld condition when it changed,
// keeping the transition time while the status stays the same.
func (c *Controller) applyHeld(ctx context.Context, group string, h Held) error {
	g, err := c.groups.Get(group)
	if err != nil {
		return nil
	}
	status := metav1.ConditionFalse
	if h.Held {
		status = metav1.ConditionTrue
	}
	have := meta.FindStatusCondition(g.Status.Conditions, ConditionFencingHeld)
	if have != nil && have.Status == status && have.Reason == h.Reason && have.Message == h.Message && have.ObservedGeneration == g.Generation {
		return nil
	}
	if was, ok := c.held[group]; ok && was == h && have != nil && have.ObservedGeneration == g.Generation {
		// Applied already; the informer has not shown it yet.
		return nil
	}
	since := metav1.NewTime(c.d.Clock.Now())
	if have != nil && have.Status == status {
		since = have.LastTransitionTime
	}
	ac := applyv1.NodeGroup(group).WithStatus(applyv1.NodeGroupStatus().WithConditions(
		metav1ac.Condition().WithType(ConditionFencingHeld).WithStatus(status).WithReason(h.Reason).WithMessage(h.Message).
			WithObservedGeneration(g.Generation).WithLastTransitionTime(since)))
	if _, err := c.d.NodeManager.DeckhouseV1().NodeGroups().ApplyStatus(ctx, ac,
		metav1.ApplyOptions{FieldManager: deckhousev1.FencingControllerFieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying condition %s to NodeGroup %s: %w", ConditionFencingHeld, group, err)
	}
	if have == nil || have.Status != status || have.Reason != h.Reason {
		c.d.Recorder.Eventf(g, nil, eventType(h), h.Reason, "Fence", "%s", h.Message)
	}
	c.mu.Lock()
	c.held[group] = h
	c.mu.Unlock()
	return nil
}

func eventType(h Held) string {
	if h.Held {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// clearGone removes the FencingHeld condition (and metrics) of groups
// that no longer have spec.fencing.
func (c *Controller) clearGone(ctx context.Context, p Plan) error {
	groups, err := c.groups.List(labels.Everything())
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range groups {
		if _, fenced := p.Groups[g.Name]; fenced || meta.FindStatusCondition(g.Status.Conditions, ConditionFencingHeld) == nil {
			continue
		}
		// Applying no condition as this manager removes the one it owns.
		ac := applyv1.NodeGroup(g.Name).WithStatus(applyv1.NodeGroupStatus())
		if _, err := c.d.NodeManager.DeckhouseV1().NodeGroups().ApplyStatus(ctx, ac,
			metav1.ApplyOptions{FieldManager: deckhousev1.FencingControllerFieldManager, Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("removing condition %s from NodeGroup %s, which has no spec.fencing: %w", ConditionFencingHeld, g.Name, err))
		}
	}
	c.mu.Lock()
	for name := range c.held {
		if _, ok := p.Groups[name]; !ok {
			delete(c.held, name)
			c.metrics.forget(name)
		}
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}
