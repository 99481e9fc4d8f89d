package bundles

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Leading reports whether this replica publishes.
func (c *Controller) Leading() bool { return c.leading.Load() }

// runLeaderElection runs for the Lease deckhousev1.BashibleAPIServerName in the bundles namespace
// until ctx ends, again after every lost term. A term's context is the one
// publishing writes with, so writes stop when the term ends; the new leader
// publishes at once.
func (c *Controller) runLeaderElection(ctx context.Context) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: deckhousev1.BashibleAPIServerName},
		Client:     c.cfg.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
	}
	durations := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   durations(c.cfg.LeaseDuration, 15*time.Second),
			RenewDeadline:   durations(c.cfg.RenewDeadline, 10*time.Second),
			RetryPeriod:     durations(c.cfg.RetryPeriod, 2*time.Second),
			ReleaseOnCancel: true,
			Name:            deckhousev1.BashibleAPIServerName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					klog.InfoS("Publishing bundles as the leader", "identity", c.cfg.Identity)
					c.leaderCtx.Store(&ctx)
					c.lastGood.setLeading(true)
					c.leading.Store(true)
					c.cfg.Metrics.Leader.Set(1)
					c.publishQ.Add(publishKey)
				},
				OnStoppedLeading: func() {
					klog.InfoS("No longer the leader", "identity", c.cfg.Identity)
					c.leading.Store(false)
					c.lastGood.setLeading(false)
					c.cfg.Metrics.Leader.Set(0)
					c.cfg.Metrics.BundleTooLarge.Reset()
				},
			},
		})
	}
}
