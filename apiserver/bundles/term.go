package bundles

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// termLock is the leader Lease's lock, which also knows until when this
// replica may still act as the leader: RenewDeadline after the start of
// its last successful renewal. client-go's leader elector ends a term
// only once it has also tried to release the Lease, which, cut off from
// kube-apiserver, it may still be trying to do when the link comes back:
// the fault drills caught a cut-off leader publishing after the other
// replica had taken the Lease. The other replica takes the Lease only
// once LeaseDuration has passed since it saw the last renewal, which it
// cannot see before the renewal started; so a replica that stops writing
// RenewDeadline after that start (RenewDeadline < LeaseDuration, checked
// at start-up) never writes at the same time as the next leader.
type termLock struct {
	resourcelock.Interface
	renewDeadline time.Duration
	now           func() time.Time
	// validUntil is in Unix nanoseconds; zero before the first renewal.
	validUntil atomic.Int64
}

func newTermLock(lock resourcelock.Interface, renewDeadline time.Duration, now func() time.Time) *termLock {
	return &termLock{Interface: lock, renewDeadline: renewDeadline, now: now}
}

// Create takes the Lease; success starts a term.
func (l *termLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := l.now()
	err := l.Interface.Create(ctx, r)
	l.renewed(start, r, err)
	return err
}

// Update renews (or takes, or releases) the Lease; a renewal by this
// replica extends its term.
func (l *termLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := l.now()
	err := l.Interface.Update(ctx, r)
	l.renewed(start, r, err)
	return err
}

func (l *termLock) renewed(start time.Time, r resourcelock.LeaderElectionRecord, err error) {
	if err != nil || r.HolderIdentity != l.Identity() {
		return
	}
	l.validUntil.Store(start.Add(l.renewDeadline).UnixNano())
}

// termContext is ctx bounded by the end of the current term, and false
// when the term has already ended.
func (l *termLock) termContext(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	until := l.validUntil.Load()
	if until == 0 || !l.now().Before(time.Unix(0, until)) {
		return ctx, func() {}, false
	}
	ctx, cancel := context.WithDeadline(ctx, time.Unix(0, until))
	return ctx, cancel, true
}
