package leadership

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestReleaseLeavesAnotherHoldersLease: handing the Lease over on shutdown
// empties it only while this process holds it; a Lease another process
// took meanwhile (this one cut off) keeps its holder (client-go's own
// release wiped it, and both replicas published).
func TestReleaseLeavesAnotherHoldersLease(t *testing.T) {
	for holder, want := range map[string]string{"other": "other", "me": ""} {
		kube := kubefake.NewClientset(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lease"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](4)},
		})
		Election{Lock: LeaseLock(kube.CoordinationV1(), "ns", "lease", "me"), RenewDeadline: time.Second}.Release()
		got, err := kube.CoordinationV1().Leases("ns").Get(context.Background(), "lease", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != want {
			t.Errorf("a Lease held by %q: holder %q after the release, want %q", holder, h, want)
		}
	}
}

// TestTermReturnsOnlyOnceItsWorkHasStopped: a term's work still running
// when the term ends is waited for, so the next campaign never overlaps it.
func TestTermReturnsOnlyOnceItsWorkHasStopped(t *testing.T) {
	kube := kubefake.NewClientset()
	e := Election{Lock: LeaseLock(kube.CoordinationV1(), "ns", "lease", "me"),
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	var stopped atomic.Bool
	led := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Term(ctx, func(termCtx context.Context) {
			close(led)
			<-termCtx.Done()
			time.Sleep(200 * time.Millisecond) // workers finishing their last sync
			stopped.Store(true)
		})
	}()
	select {
	case <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("the term did not start with a free Lease")
	}
	cancel()
	<-done
	if !stopped.Load() {
		t.Error("Term returned while its work was still running")
	}
}
