package bundles

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock answers Update with err and remembers nothing.
type fakeLock struct{ err error }

func (l *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return nil, nil, l.err
}
func (l *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *fakeLock) RecordEvent(string)                                              {}
func (l *fakeLock) Identity() string                                                { return "me" }
func (l *fakeLock) Describe() string                                                { return "test/lease" }

// TestTermEndsRenewDeadlineAfterTheLastRenewalStarted: a leader that can
// no longer renew stops writing RenewDeadline after its last successful
// renewal began, whatever client-go is still doing, and a release (a
// record naming no holder) does not extend the term.
func TestTermEndsRenewDeadlineAfterTheLastRenewalStarted(t *testing.T) {
	now := time.Unix(1000, 0)
	inner := &fakeLock{}
	l := newTermLock(inner, 3*time.Second, func() time.Time { return now })
	if _, _, ok := l.termContext(context.Background()); ok {
		t.Fatal("a term before the Lease was ever taken")
	}
	if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	ctx, cancel, ok := l.termContext(context.Background())
	defer cancel()
	if deadline, _ := ctx.Deadline(); !ok || !deadline.Equal(time.Unix(1003, 0)) {
		t.Errorf("2 s after a renewal: term %t until %v; want until 3 s after the renewal began", ok, deadline)
	}
	inner.err = errors.New("connection refused")
	_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
	inner.err = nil
	_ = l.Update(context.Background(), resourcelock.LeaderElectionRecord{}) // the release
	now = now.Add(time.Second)
	if _, _, ok := l.termContext(context.Background()); ok {
		t.Error("the term outlived its renew deadline after failed renewals and a release")
	}
}
