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
// until ctx ends, again after every lost term, and then hands the Lease over
// if it still holds it. Publishing writes with the term's context bounded by
// the term's end (termLock), so writes stop when the term ends; the new
// leader publishes at once.
//
// client-go's ReleaseOnCancel is not used: it releases after a lost term too,
// judging leadership by the record it last saw rather than by the Lease it
// has just read, so a leader cut off from kube-apiserver wiped the record of
// the replica that had taken the Lease meanwhile, took it back, and both
// published (the fault drills caught it).
func (c *Controller) runLeaderElection(ctx context.Context) {
	defer c.releaseLease()
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:          c.term,
			LeaseDuration: c.cfg.LeaseDuration,
			RenewDeadline: c.cfg.RenewDeadline,
			RetryPeriod:   c.cfg.RetryPeriod,
			Name:          deckhousev1.BashibleAPIServerName,
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

// releaseLease empties the Lease's holder, so that a standby takes it at
// once, only if this replica holds it now; the update carries the read's
// resourceVersion, so a Lease taken meanwhile is never overwritten.
func (c *Controller) releaseLease() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RenewDeadline)
	defer cancel()
	rec, _, err := c.term.Get(ctx)
	if err != nil || rec.HolderIdentity != c.term.Identity() {
		return
	}
	now := metav1.NewTime(time.Now())
	released := resourcelock.LeaderElectionRecord{LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now}
	if err := c.term.Update(ctx, released); err != nil {
		klog.ErrorS(err, "Releasing the leader Lease failed; a standby takes it when it expires", "identity", c.cfg.Identity)
	}
}
