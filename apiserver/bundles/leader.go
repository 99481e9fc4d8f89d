package bundles

import (
	"context"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Leading reports whether this replica publishes.
func (c *Controller) Leading() bool { return c.leading.Load() }

// runLeaderElection runs for the Lease deckhousev1.BashibleAPIServerName in the bundles namespace
// until ctx ends, again after every lost term. Publishing writes with the
// term's context bounded by the term's end (termLock), so writes stop when
// the term ends even while client-go still tries to release the Lease; the
// new leader publishes at once.
func (c *Controller) runLeaderElection(ctx context.Context) {
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            c.term,
			LeaseDuration:   c.cfg.LeaseDuration,
			RenewDeadline:   c.cfg.RenewDeadline,
			RetryPeriod:     c.cfg.RetryPeriod,
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
