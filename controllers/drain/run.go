package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// pollInterval is how often a drain checks whether evicted pods are gone.
const pollInterval = time.Second

// run is one node's drain; its identity tells a finished run from a newer
// one for the same node. A finishing run is recording its success: the
// removal of the draining annotation that success writes must not cancel
// it (its own write reaches the informer, and so stop, before the write's
// response reaches the run).
type run struct {
	cancel    context.CancelFunc
	finishing bool
}

// start runs the node's drain in the background, unless one runs already
// or the controller is not running.
func (c *Controller) start(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[name]; ok || c.ctx == nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	// The drain outlives the sync that started it: its lines say whose
	// drain they are, as the sync's do.
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("controller", Name, "key", name))
	r := &run{cancel: cancel}
	c.running[name] = r
	c.metrics.Draining.WithLabelValues(name).Set(1)
	c.drains.Add(1)
	go func() {
		defer c.drains.Done()
		defer func() {
			c.mu.Lock()
			if c.running[name] == r { // not a newer drain of the same node
				delete(c.running, name)
			}
			c.mu.Unlock()
			cancel()
		}()
		c.drain(ctx, name)
	}()
}

// stop cancels a running drain and reports whether there was one; a
// drain recording its success is left to finish.
func (c *Controller) stop(ctx context.Context, name, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.running[name]
	if ok && r.finishing {
		return false
	}
	if ok {
		klog.FromContext(ctx).Info("Cancelling drain", "node", name, "reason", why)
		r.cancel()
		delete(c.running, name)
	}
	return ok
}

// finish marks the node's running drain as recording its success, so that
// stop leaves it alone; false when the drain was cancelled meanwhile.
func (c *Controller) finish(ctx context.Context, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.running[name]
	if !ok || ctx.Err() != nil {
		return false
	}
	r.finishing = true
	return true
}

// timeout is the deadline of the node's drain (the group's
// nodeDrainTimeoutSecond, else --default-drain-timeout) and policy what
// happens at it (the group's drainTimeoutPolicy).
func (c *Controller) timeout(n *corev1.Node) (time.Duration, deckhousev1.DrainTimeoutPolicy) {
	g, err := c.groups.Get(c.d.Nodes.GroupOf(n.Name))
	if err != nil {
		g = nil
	}
	if g != nil && g.Spec.NodeDrainTimeoutSecond != nil && *g.Spec.NodeDrainTimeoutSecond > 0 {
		return time.Duration(*g.Spec.NodeDrainTimeoutSecond) * time.Second, Policy(g)
	}
	return c.opts.DrainTimeout, Policy(g)
}

// heldError is a drain that passed its deadline under Wait with pods a
// PodDisruptionBudget keeps on the node.
type heldError struct{ msg string }

func (e *heldError) Error() string { return e.msg }

// errCancelled means the draining annotation went away mid-drain.
var errCancelled = errors.New("drain cancelled")

// drain runs attempts until one succeeds or the drain is cancelled. Each
// attempt has the group's deadline; a failed attempt is recorded as
// drain-failed and retried after the eviction retry interval.
func (c *Controller) drain(ctx context.Context, name string) {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := c.attempt(ctx, name)
		switch {
		case err == nil:
			return
		case errors.Is(err, errCancelled) || ctx.Err() != nil:
			return
		}
		klog.FromContext(ctx).Info("Drain attempt failed; retrying", "node", name, "attempt", attempt, "err", err)
		c.metrics.Drains.WithLabelValues("failed").Inc()
		if n, gerr := c.d.Nodes.Get(name); gerr == nil && nodes.Has(n, deckhousev1.DrainingAnnotation) && ctx.Err() == nil {
			c.metrics.DrainFailed.WithLabelValues(name).Set(1)
			if held := (*heldError)(nil); errors.As(err, &held) {
				c.metrics.HeldByBudget.WithLabelValues(name).Set(1)
			} else {
				c.metrics.HeldByBudget.DeleteLabelValues(name)
			}
			c.d.Recorder.Eventf(n, nil, corev1.EventTypeWarning, "DrainFailed", "Drain", "%s; retrying", truncate(err.Error(), 900))
			c.record(ctx, name, func(n *corev1.Node) *nodes.Change { return Failed(n, err.Error()) })
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.opts.EvictionRetry):
		}
	}
}

// record re-reads the node and writes the change while the drain is still
// asked for, retrying on conflicts.
func (c *Controller) record(ctx context.Context, name string, change func(*corev1.Node) *nodes.Change) bool {
	for try := 0; try < 10 && ctx.Err() == nil; try++ {
		n, err := c.d.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || !nodes.Has(n, deckhousev1.DrainingAnnotation) {
			return false
		}
		if _, err = nodes.Patch(ctx, c.d.Kube, c.d.Nodes, n, change(n)); err == nil {
			return true
		} else if !apierrors.IsConflict(err) {
			klog.FromContext(ctx).Error(err, "Recording drain state failed", "node", name)
			return false
		}
	}
	return false
}

// refusal is why a pod's last eviction failed.
type refusal struct {
	err string
	// budget: a PodDisruptionBudget refused it (HTTP 429).
	budget bool
}

// attempt cordons the node and evicts its pods, each again every
// EvictionRetry while it is refused, until none is left or the deadline
// passes. At the deadline the group's drainTimeoutPolicy decides: Delete
// deletes the pods left (an Event on the Node for each) and waits for them
// to go; Wait fails the attempt, naming the budgets that hold the pods.
func (c *Controller) attempt(ctx context.Context, name string) error {
	n, err := c.d.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if !nodes.Has(n, deckhousev1.DrainingAnnotation) {
		return errCancelled
	}
	timeout, policy := c.timeout(n)
	deadline := c.d.Clock.Now().Add(timeout)
	if !c.record(ctx, name, Cordon) && !n.Spec.Unschedulable {
		if ctx.Err() != nil {
			return errCancelled
		}
		return fmt.Errorf("cordoning node %s failed", name)
	}
	lastTry := map[types.UID]time.Time{}
	blocked := map[types.UID]refusal{}
	deleted := 0
	// gone is how long pods deleted at the deadline get to leave: their
	// grace period and one more retry interval.
	var gone time.Time
	for {
		if ctx.Err() != nil {
			return errCancelled
		}
		pods, err := c.podsToEvict(ctx, name)
		if err != nil {
			return err
		}
		if cur, err := c.d.Nodes.Get(name); err == nil && !nodes.IsReady(cur) {
			// No kubelet confirms deletions on a NotReady node: a pod that
			// was evicted (and so counted against its budget) has left as
			// far as a drain can tell, as kubectl drain's
			// --skip-wait-for-delete-timeout treats it.
			pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		}
		if len(pods) == 0 {
			if !c.finish(ctx, name) {
				return errCancelled
			}
			// The success removes the draining annotation, which stops
			// cancelling this run: the write is not cut off by its own echo.
			if c.record(context.WithoutCancel(ctx), name, Succeeded) {
				msg := "every pod has left the node"
				if deleted > 0 {
					msg = fmt.Sprintf("every pod has left the node; %d of them deleted at the drain deadline (see the PodDeletedAtDrainDeadline events)", deleted)
				}
				c.d.Recorder.Eventf(n, nil, corev1.EventTypeNormal, "DrainSucceeded", "Drain", "%s", msg)
				c.metrics.Drains.WithLabelValues("succeeded").Inc()
				c.metrics.DrainFailed.DeleteLabelValues(name)
				c.metrics.HeldByBudget.DeleteLabelValues(name)
				c.metrics.Draining.DeleteLabelValues(name)
				return nil
			}
			return errCancelled
		}
		now := c.d.Clock.Now()
		if now.After(deadline) {
			left := c.left(ctx, pods, blocked)
			del := AtDeadline(policy, left)
			if len(del) == 0 && (policy == deckhousev1.DrainTimeoutWait || now.After(gone)) {
				msg := fmt.Sprintf("drain of node %s did not finish within %s (drainTimeoutPolicy %s); %d pod(s) left: %s", name, timeout, policy, len(pods), Why(left))
				if policy == deckhousev1.DrainTimeoutWait && HeldByBudget(left) {
					return &heldError{msg}
				}
				return errors.New(msg)
			}
			for i, l := range del {
				p := podNamed(pods, l.Pod)
				if err := c.delete(ctx, p); err != nil {
					return fmt.Errorf("deleting pod %s, left on node %s at the drain deadline: %w", l.Pod, name, err)
				}
				deleted++
				c.metrics.Deleted.Inc()
				klog.FromContext(ctx).Info("Deleted a pod left at the drain deadline", "node", name, "pod", l.Pod, "budgets", l.Budgets, "err", l.Err)
				c.d.Recorder.Eventf(n, p, corev1.EventTypeWarning, "PodDeletedAtDrainDeadline", "Drain", "%s", DeletedMessage(del[i], timeout))
				gone = latest(gone, now.Add(grace(p)+c.opts.EvictionRetry))
			}
		} else {
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					continue
				}
				if t, ok := lastTry[p.UID]; ok && now.Sub(t) < c.opts.EvictionRetry {
					continue
				}
				lastTry[p.UID] = now
				if r := c.evict(ctx, p); r != nil {
					blocked[p.UID] = *r
				} else {
					delete(blocked, p.UID)
				}
			}
		}
		select {
		case <-ctx.Done():
			return errCancelled
		case <-time.After(pollInterval):
		}
		if cur, err := c.d.Nodes.Get(name); err == nil && !nodes.Has(cur, deckhousev1.DrainingAnnotation) {
			return errCancelled
		}
	}
}

// left describes the pods still on the node at the deadline, with the
// budgets that select those whose eviction was refused.
func (c *Controller) left(ctx context.Context, pods []corev1.Pod, blocked map[types.UID]refusal) []Left {
	budgets := map[string][]policyv1.PodDisruptionBudget{}
	out := make([]Left, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		l := Left{Pod: p.Namespace + "/" + p.Name, Terminating: p.DeletionTimestamp != nil}
		if r, ok := blocked[p.UID]; ok && !l.Terminating {
			l.Err, l.Refused = r.err, r.budget
		}
		if l.Refused {
			if _, ok := budgets[p.Namespace]; !ok {
				list, err := c.d.Kube.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
				if err != nil {
					// The API's own refusal still names the budget.
					klog.FromContext(ctx).Error(err, "Listing PodDisruptionBudgets failed; the drain reports the eviction's refusal only", "namespace", p.Namespace)
				} else {
					budgets[p.Namespace] = list.Items
				}
			}
			l.Budgets = Budgets(p, budgets[p.Namespace])
		}
		out = append(out, l)
	}
	return out
}

// delete deletes a pod left at the deadline, with its own grace period.
func (c *Controller) delete(ctx context.Context, p *corev1.Pod) error {
	err := c.d.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &p.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or another pod of the same name
	}
	return err
}

func podNamed(pods []corev1.Pod, key string) *corev1.Pod {
	for i := range pods {
		if pods[i].Namespace+"/"+pods[i].Name == key {
			return &pods[i]
		}
	}
	return nil
}

// grace is the pod's termination grace period (Kubernetes' default when unset).
func grace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// podsToEvict lists the node's pods that a drain must move: not mirror
// pods, not DaemonSet pods, not finished ones.
func (c *Controller) podsToEvict(ctx context.Context, node string) ([]corev1.Pod, error) {
	list, err := c.d.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if skip(&p) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func skip(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// evict asks the Eviction API to evict the pod; nil means it is evicted
// (or gone), otherwise why not.
func (c *Controller) evict(ctx context.Context, p corev1.Pod) *refusal {
	err := c.d.Kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &p.UID},
		},
	})
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		// The API names the budget in a cause of the refusal.
		msg := err.Error()
		var st apierrors.APIStatus
		if errors.As(err, &st) && st.Status().Details != nil {
			for _, cause := range st.Status().Details.Causes {
				if cause.Type == policyv1.DisruptionBudgetCause {
					msg = cause.Message
				}
			}
		}
		return &refusal{err: msg, budget: true}
	}
	return &refusal{err: "evicting: " + err.Error()}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
