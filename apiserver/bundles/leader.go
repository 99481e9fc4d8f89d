package bundles

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/internal/leadership"
)

// Leading reports whether this replica publishes.
func (c *Controller) Leading() bool { return c.leading.Load() }

// runLeaderElection runs for the Lease deckhousev1.BashibleAPIServerName in
// the bundles namespace until ctx ends, again after every lost term, and
// then hands the Lease over if it still holds it (leadership.Election).
// Only publishing depends on the term: the replica renders and serves
// reads whether it leads or not. Publishing writes with the term's context
// bounded by the term's end (termLock), so writes stop when the term ends;
// the new leader publishes at once.
func (c *Controller) runLeaderElection(ctx context.Context) {
	e := leadership.Election{Lock: c.term, LeaseDuration: c.cfg.LeaseDuration, RenewDeadline: c.cfg.RenewDeadline, RetryPeriod: c.cfg.RetryPeriod}
	defer e.Release()
	for ctx.Err() == nil {
		e.Term(ctx, c.lead)
	}
}

// lead publishes for one term: it returns once the term has ended and
// this replica has stopped publishing.
func (c *Controller) lead(ctx context.Context) {
	klog.InfoS("Publishing bundles as the leader", "identity", c.cfg.Identity)
	c.leaderCtx.Store(&ctx)
	c.lastGood.setLeading(true)
	c.leading.Store(true)
	c.cfg.Metrics.Leader.Set(1)
	c.publishQ.Add(publishKey)
	<-ctx.Done()
	klog.InfoS("No longer the leader; serving reads, no longer publishing", "identity", c.cfg.Identity)
	c.leading.Store(false)
	c.lastGood.setLeading(false)
	c.cfg.Metrics.Leader.Set(0)
	c.cfg.Metrics.BundleTooLarge.Reset()
}
