// Package leadership runs a process's terms as the leader of a Lease. Both
// binaries use it: bashible-apiserver publishes bundles, and
// node-manager-controller runs its controllers, only during a term, and
// both go back to standby and campaign again after losing one, in the same
// process. It lives outside apiserver/ and controllers/ because it belongs
// to neither: it is the one piece of machinery the two binaries share
// besides the API types.
//
// client-go's leader elector does the campaigning and renewing; two things
// are added here. A term's work is joined before the next campaign
// (Election.Term), so a process never runs two terms' work at once; and the
// Lease is handed over on shutdown only while this process holds it
// (Election.Release), instead of by client-go's ReleaseOnCancel, which
// after a lost term judges leadership by the record it last saw rather than
// by the Lease it has just read, and so wiped the record of the replica
// that had taken the Lease while this one was cut off from kube-apiserver
// (the fault drills caught both replicas publishing after that).
package leadership

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaseLock is the lock of the Lease namespace/name, held as identity.
func LeaseLock(client coordinationv1client.LeasesGetter, namespace, name, identity string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
}

// Election is one Lease's lock and timing. RenewDeadline must be shorter
// than LeaseDuration: a leader that could not renew for RenewDeadline ends
// its term before anyone else may take the Lease.
type Election struct {
	Lock          resourcelock.Interface
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Term campaigns for the Lease until this process takes it or ctx ends,
// then runs lead with a context that ends with the term (the Lease not
// renewed for RenewDeadline, or ctx ended). It returns once the term has
// ended and lead has returned, so the caller can campaign again knowing
// that nothing of the last term still runs. Without a term (ctx ended
// first) lead is not called.
func (e Election) Term(ctx context.Context, lead func(ctx context.Context)) {
	var (
		mu      sync.Mutex
		ended   bool
		running sync.WaitGroup
	)
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:          e.Lock,
		LeaseDuration: e.LeaseDuration,
		RenewDeadline: e.RenewDeadline,
		RetryPeriod:   e.RetryPeriod,
		Name:          e.Lock.Describe(),
		Callbacks: leaderelection.LeaderCallbacks{
			// client-go starts this in a goroutine of its own, which may run
			// only after the term has ended: then the term is not led.
			OnStartedLeading: func(termCtx context.Context) {
				mu.Lock()
				if ended {
					mu.Unlock()
					return
				}
				running.Add(1)
				mu.Unlock()
				defer running.Done()
				lead(termCtx)
			},
			OnStoppedLeading: func() {},
		},
	})
	mu.Lock()
	ended = true
	mu.Unlock()
	running.Wait()
}

// Release empties the Lease's holder, so that a standby takes it at once,
// only if this process holds it now; the update carries the read's
// resourceVersion, so a Lease another process took meanwhile is never
// overwritten. It waits at most RenewDeadline.
func (e Election) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.RenewDeadline)
	defer cancel()
	held, _, err := e.Lock.Get(ctx)
	if err != nil || held.HolderIdentity != e.Lock.Identity() {
		return
	}
	now := metav1.NewTime(time.Now())
	released := resourcelock.LeaderElectionRecord{LeaderTransitions: held.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now}
	if err := e.Lock.Update(ctx, released); err != nil {
		klog.ErrorS(err, "Handing the leader Lease over failed; a standby takes it when it expires", "lease", e.Lock.Describe(), "identity", e.Lock.Identity())
	}
}
