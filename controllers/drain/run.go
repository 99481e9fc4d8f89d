package drain

import (
	"context"
	"errors"
	"fmt"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/controllers/nodes"
)

// pollInterval is how often a drain checks whether evicted pods are gone.
const pollInterval = time.Second

// run is one node's drain; its identity tells a finished run from a newer
// one for the same node.
type run struct{ cancel context.CancelFunc }

// start runs the node's drain in the background, unless one runs already
// or the controller is not running.
func (c *Controller) start(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[name]; ok || c.ctx == nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	r := &run{cancel: cancel}
	c.running[name] = r
	c.metrics.Draining.WithLabelValues(name).Set(1)
	go func() {
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

// stop cancels a running drain and reports whether there was one.
func (c *Controller) stop(name, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.running[name]
	if ok {
		klog.InfoS("Cancelling drain", "node", name, "reason", why)
		r.cancel()
		delete(c.running, name)
	}
	return ok
}

func (c *Controller) timeout(n *corev1.Node) time.Duration {
	if g, err := c.groups.Get(nodes.Group(n)); err == nil && g.Spec.NodeDrainTimeoutSecond != nil && *g.Spec.NodeDrainTimeoutSecond > 0 {
		return time.Duration(*g.Spec.NodeDrainTimeoutSecond) * time.Second
	}
	return c.d.Options.DrainTimeout
}

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
		klog.InfoS("Drain attempt failed; retrying", "node", name, "attempt", attempt, "err", err)
		c.metrics.Drains.WithLabelValues("failed").Inc()
		if n, gerr := c.d.Nodes.Get(name); gerr == nil && nodes.Has(n, deckhousev1.DrainingAnnotation) && ctx.Err() == nil {
			c.metrics.DrainFailed.WithLabelValues(name).Set(1)
			c.d.Recorder.Eventf(n, nil, corev1.EventTypeWarning, "DrainFailed", "Drain", "%s; retrying", truncate(err.Error(), 900))
			c.record(ctx, name, func(n *corev1.Node) *nodes.Change { return Failed(n, err.Error()) })
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.d.Options.EvictionRetry):
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
			klog.ErrorS(err, "Recording drain state failed", "node", name)
			return false
		}
	}
	return false
}

func (c *Controller) attempt(ctx context.Context, name string) error {
	n, err := c.d.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if !nodes.Has(n, deckhousev1.DrainingAnnotation) {
		return errCancelled
	}
	timeout := c.timeout(n)
	deadline := c.d.Clock.Now().Add(timeout)
	if !c.record(ctx, name, Cordon) && !n.Spec.Unschedulable {
		if ctx.Err() != nil {
			return errCancelled
		}
		return fmt.Errorf("cordoning node %s failed", name)
	}
	lastTry := map[types.UID]time.Time{}
	blocked := map[types.UID]string{}
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
			if c.record(ctx, name, Succeeded) {
				c.d.Recorder.Eventf(n, nil, corev1.EventTypeNormal, "DrainSucceeded", "Drain", "every pod has left the node")
				c.metrics.Drains.WithLabelValues("succeeded").Inc()
				c.metrics.DrainFailed.DeleteLabelValues(name)
				c.metrics.Draining.DeleteLabelValues(name)
				return nil
			}
			return errCancelled
		}
		now := c.d.Clock.Now()
		if now.After(deadline) {
			var why []string
			for _, p := range pods {
				if r, ok := blocked[p.UID]; ok {
					why = append(why, fmt.Sprintf("%s/%s: %s", p.Namespace, p.Name, r))
				} else {
					why = append(why, fmt.Sprintf("%s/%s: still terminating", p.Namespace, p.Name))
				}
			}
			sort.Strings(why)
			return fmt.Errorf("drain of node %s did not finish within %s; %d pod(s) left: %s", name, timeout, len(pods), strings.Join(why, "; "))
		}
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			if t, ok := lastTry[p.UID]; ok && now.Sub(t) < c.d.Options.EvictionRetry {
				continue
			}
			lastTry[p.UID] = now
			if err := c.evict(ctx, p); err != nil {
				blocked[p.UID] = err.Error()
			} else {
				delete(blocked, p.UID)
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

func (c *Controller) evict(ctx context.Context, p corev1.Pod) error {
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
		return fmt.Errorf("eviction refused, a PodDisruptionBudget allows no disruption now: %w", err)
	}
	return fmt.Errorf("evicting: %w", err)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
