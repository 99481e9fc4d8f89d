package bundles

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
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

// TestReleaseLeavesAnotherHoldersLease: handing the Lease over on shutdown
// empties it only while this replica holds it; a Lease another replica took
// meanwhile (this one cut off) keeps its holder (client-go's own release
// wiped it, and both replicas published).
func TestReleaseLeavesAnotherHoldersLease(t *testing.T) {
	for holder, wantHolder := range map[string]string{"other": "other", "me": ""} {
		kube := kubefake.NewClientset(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lease"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](4)},
		})
		lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lease"}, Client: kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "me"}}
		c := &Controller{cfg: ControllerConfig{Identity: "me", RenewDeadline: time.Second}, term: newTermLock(lock, time.Second, time.Now)}
		c.releaseLease()
		got, err := kube.CoordinationV1().Leases("ns").Get(context.Background(), "lease", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != wantHolder {
			t.Errorf("a Lease held by %q: holder %q after the release, want %q", holder, h, wantHolder)
		}
	}
}
