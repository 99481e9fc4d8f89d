package framework

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/hack/controlplane"
)

// Heartbeat plays the part of a node's kubelet that the fencing controller
// watches: it renews the node's Lease in kube-node-lease every interval,
// with the node's own identity (system:node:<name>, so the Node authorizer
// and NodeRestriction check it as they check a kubelet), until it is
// paused or stopped.
type Heartbeat struct {
	node   string
	every  time.Duration
	leases coordinationclient.LeaseInterface
	stop   context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	paused bool
	lease  *coordinationv1.Lease
}

// StartHeartbeat creates (or takes over) node's Lease, renewed now, and
// renews it every interval until ctx ends or Stop is called.
func StartHeartbeat(ctx context.Context, cp *controlplane.ControlPlane, node string, every time.Duration) (*Heartbeat, error) {
	cfg, err := cp.NodeConfig(node)
	if err != nil {
		return nil, err
	}
	leases := kubernetes.NewForConfigOrDie(cfg).CoordinationV1().Leases(corev1.NamespaceNodeLease)
	h := &Heartbeat{node: node, every: every, leases: leases, done: make(chan struct{})}
	if err := h.renew(ctx); err != nil {
		return nil, err
	}
	ctx, h.stop = context.WithCancel(ctx)
	go func() {
		defer close(h.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := h.renew(ctx); err != nil && ctx.Err() == nil {
					klog.ErrorS(err, "Renewing a test node's Lease failed; retrying", "node", node)
				}
			}
		}
	}()
	return h, nil
}

// TestHeartbeat starts node's heartbeat for the test, renewing every
// 200 ms; it stops when the test ends.
func (f *Framework) TestHeartbeat(t testing.TB, node string) *Heartbeat {
	t.Helper()
	h, err := StartHeartbeat(Context(t), f.CP, node, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("start the heartbeat of node %s: %v", node, err)
	}
	t.Cleanup(h.Stop)
	return h
}

// renew writes the Lease with renewTime now, unless paused.
func (h *Heartbeat) renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused {
		return nil
	}
	now := metav1.NewMicroTime(time.Now())
	if h.lease == nil {
		l, err := h.leases.Get(ctx, h.node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			duration := int32(40)
			l, err = h.leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: h.node, Namespace: corev1.NamespaceNodeLease},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &h.node, LeaseDurationSeconds: &duration, RenewTime: &now},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create the Lease of node %s: %w", h.node, err)
			}
			h.lease = l
			return nil
		case err != nil:
			return fmt.Errorf("read the Lease of node %s: %w", h.node, err)
		}
		h.lease = l
	}
	l := h.lease.DeepCopy()
	l.Spec.RenewTime = &now
	updated, err := h.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		h.lease = nil // read it again next time
		return fmt.Errorf("renew the Lease of node %s: %w", h.node, err)
	}
	h.lease = updated
	return nil
}

// Pause stops renewing, as a node that died or lost the API, and returns
// the last renewal written: no renewal is written after Pause returns.
func (h *Heartbeat) Pause() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = true
	if h.lease == nil || h.lease.Spec.RenewTime == nil {
		return time.Time{}
	}
	return h.lease.Spec.RenewTime.Time
}

// Resume renews again from the next tick on.
func (h *Heartbeat) Resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = false
}

// Stop ends the heartbeat and waits for it to end.
func (h *Heartbeat) Stop() {
	h.stop()
	<-h.done
}
