package clusterapi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// Chaos (spec.chaos.mode DrainAndDelete): once per chaos.period, one
// random machine of a group whose machines Cluster API makes (a
// CloudEphemeral group, or a static group with staticInstances) is
// deleted: Cluster API drains its node and deletes it, and the group's
// MachineDeployment makes a new one. As Deckhouse's chaos monkey, only
// while the group is whole and ready; unlike it, never below the group's
// minimum, and on a schedule kept on the group
// (deckhousev1.ChaosLastVictimAnnotation) rather than a coin thrown every
// minute, so a restart neither skips nor repeats a victim.

// chaosRecheck is how soon a group held back (not ready, a machine being
// replaced) is looked at again.
const chaosRecheck = time.Minute

// ChaosPeriod is the group's chaos.period (6h when unset), or an error for
// a value outside the API's pattern.
func ChaosPeriod(ng *deckhousev1.NodeGroup) (time.Duration, error) {
	p := "6h"
	if ng.Spec.Chaos != nil && ng.Spec.Chaos.Period != "" {
		p = ng.Spec.Chaos.Period
	}
	d, err := time.ParseDuration(p)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("NodeGroup %s: chaos.period %q is not a period such as 6h or 90m", ng.Name, p)
	}
	return d, nil
}

// ChaosVictim picks the machine to delete among the group's, or says why
// none may go now: every machine must be Running with a Ready node and not
// being deleted, there must be more than one, and one fewer must still be
// at least min. pick chooses an index below its argument.
func ChaosVictim(machines []*clusterv1.Machine, groupNodes []*corev1.Node, min int32, pick func(int) int) (*clusterv1.Machine, string) {
	ready := map[string]bool{}
	for _, n := range groupNodes {
		if nodes.IsReady(n) {
			ready[n.Name] = true
		}
	}
	for _, m := range machines {
		switch {
		case m.DeletionTimestamp != nil:
			return nil, fmt.Sprintf("machine %s is being deleted", m.Name)
		case m.Status.Phase != string(clusterv1.MachinePhaseRunning):
			return nil, fmt.Sprintf("machine %s is %s, not Running", m.Name, m.Status.Phase)
		case !ready[m.Status.NodeRef.Name]:
			return nil, fmt.Sprintf("the node of machine %s is not Ready", m.Name)
		}
	}
	if len(groupNodes) != len(machines) {
		return nil, fmt.Sprintf("%d nodes and %d machines: a node is not a machine's", len(groupNodes), len(machines))
	}
	if len(machines) < 2 {
		return nil, fmt.Sprintf("%d machines: chaos needs at least 2", len(machines))
	}
	if int32(len(machines))-1 < min {
		return nil, fmt.Sprintf("%d machines: one fewer would be below the group's minimum of %d", len(machines), min)
	}
	return machines[pick(len(machines))], ""
}

// chaosKey keys a node or Machine of a group with chaos on by the group's
// chaos: a change of either may let chaos go on.
func (c *Controller) chaosKey(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	group := o.GetLabels()[deckhousev1.NodeGroupLabel]
	if group == "" {
		return ""
	}
	if ng, err := c.groups.Get(group); err == nil && c.chaosWanted(ng) {
		return chaosPrefix + group
	}
	return ""
}

// heldReasons remembers, per group, why chaos last held back.
type heldReasons struct {
	mu sync.Mutex
	m  map[string]string
}

// Swap records why (or "" for nothing held) and returns what was before.
func (h *heldReasons) Swap(group, why string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.m[group]
	if h.m == nil {
		h.m = map[string]string{}
	}
	if why == "" {
		delete(h.m, group)
	} else {
		h.m[group] = why
	}
	return old
}

// chaosWanted reports whether chaos is on for a group whose machines this
// controller has Cluster API make.
func (c *Controller) chaosWanted(ng *deckhousev1.NodeGroup) bool {
	return ng != nil && ng.DeletionTimestamp == nil && ng.Spec.Chaos != nil && ng.Spec.Chaos.Mode == deckhousev1.ChaosModeDrainAndDelete &&
		(Wanted(ng) || c.classes != nil && CloudWanted(ng))
}

// syncChaos deletes the group's next victim when it is due and the group
// allows it, and queues the group again for the next look.
func (c *Controller) syncChaos(ctx context.Context, group string) error {
	key := chaosPrefix + group
	ng, err := c.groups.Get(group)
	if apierrors.IsNotFound(err) || err == nil && !c.chaosWanted(ng) {
		return nil
	}
	if err != nil {
		return err
	}
	period, err := ChaosPeriod(ng)
	if err != nil {
		return err
	}
	now := c.d.Clock.Now()
	last, err := time.Parse(time.RFC3339, ng.Annotations[deckhousev1.ChaosLastVictimAnnotation])
	// What this process wrote last counts too: the informer may not show
	// the group's new mark yet when another change queues it again.
	if mine := c.chaosMarks.get(group); err == nil && mine.After(last) || err != nil && !mine.IsZero() {
		last, err = mine, nil
	}
	if err != nil {
		// Chaos was just turned on (or the mark is unreadable): the first
		// victim is a period away.
		c.queue.AddAfter(key, period)
		return c.markChaos(ctx, ng, now)
	}
	if due := last.Add(period); now.Before(due) {
		c.queue.AddAfter(key, due.Sub(now))
		return nil
	}
	machines, err := c.groupMachines(group)
	if err != nil {
		return err
	}
	groupNodes, err := c.d.Nodes.InGroup(group)
	if err != nil {
		return err
	}
	var min int32
	if CloudWanted(ng) {
		cloud, err := c.cloud()
		if err != nil {
			return err
		}
		min = ng.Spec.CloudInstances.MinPerZone * int32(len(cloud.ZonesOf(ng)))
	}
	victim, held := ChaosVictim(machines, groupNodes, min, rand.IntN)
	if victim == nil {
		// Said once per reason; looked at again when a node or machine of
		// the group changes, or after chaosRecheck.
		if c.chaosHeld.Swap(group, held) != held {
			c.d.Recorder.Eventf(ng, nil, corev1.EventTypeNormal, "ChaosMonkeyHeld", deckhousev1.ChaosModeDrainAndDelete,
				"A machine is due to be deleted (chaos.mode DrainAndDelete), held back: %s", held)
			klog.FromContext(ctx).Info("Chaos holds back", "group", group, "why", held)
		}
		c.queue.AddAfter(key, chaosRecheck)
		return nil
	}
	c.chaosHeld.Swap(group, "")
	// The mark first: a failure after it skips this victim, never repeats one.
	if err := c.markChaos(ctx, ng, now); err != nil {
		return err
	}
	ns := c.d.Namespace
	err = c.d.Dynamic.Resource(machinesResource).Namespace(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &victim.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("chaos: deleting Machine %s/%s of group %s: %w", ns, victim.Name, group, err)
	}
	c.chaosVictims.WithLabelValues(group).Inc()
	c.d.Recorder.Eventf(ng, nil, corev1.EventTypeNormal, "ChaosMonkeyVictim", deckhousev1.ChaosModeDrainAndDelete,
		"Deleted Machine %s (node %s): chaos.mode DrainAndDelete, one machine every %s; Cluster API drains the node and the group gets a new machine",
		victim.Name, victim.Status.NodeRef.Name, period)
	klog.FromContext(ctx).Info("Chaos deleted a machine of the group", "group", group, "machine", klog.KRef(ns, victim.Name),
		"node", victim.Status.NodeRef.Name, "period", period)
	c.queue.AddAfter(key, period)
	return nil
}

// markChaos records on the group, and in this process, when the period
// started.
func (c *Controller) markChaos(ctx context.Context, ng *deckhousev1.NodeGroup, at time.Time) error {
	at = at.UTC().Truncate(time.Second)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, deckhousev1.ChaosLastVictimAnnotation, at.Format(time.RFC3339))
	if _, err := c.d.NodeManager.DeckhouseV1().NodeGroups().Patch(ctx, ng.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("chaos: recording the time on NodeGroup %s: %w", ng.Name, err)
	}
	c.chaosMarks.set(ng.Name, at)
	return nil
}

// chaosMarks are the times this process last marked, per group.
type chaosMarks struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (c *chaosMarks) get(group string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[group]
}

func (c *chaosMarks) set(group string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]time.Time{}
	}
	c.m[group] = at
}

// groupMachines are the group's Machines (labelled with it by its
// MachineDeployments' templates).
func (c *Controller) groupMachines(group string) ([]*clusterv1.Machine, error) {
	machines, err := c.listMachines()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(machines, func(m *clusterv1.Machine) bool { return m.Labels[deckhousev1.NodeGroupLabel] != group }), nil
}
