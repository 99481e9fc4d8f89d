package drills

import (
	"context"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// restartReplica stops replica i (gracefully, or with SIGKILL when kill)
// and starts it again on the same port, and says how long the new
// process took to become ready once started.
func restartReplica(t *testing.T, i int, kill bool) (ready time.Duration) {
	t.Helper()
	if kill {
		replicas[i].Kill()
	}
	start := time.Now()
	r, err := replicas[i].Restart(framework.Context(t))
	if err != nil {
		t.Fatalf("restart replica %d: %v", i, err)
	}
	replicas[i] = r
	return time.Since(start)
}

// waitInService waits until the Service sends connections to both
// replicas again.
func waitInService(t *testing.T) {
	t.Helper()
	framework.Poll(t, "both replicas in the Service", func(context.Context) (bool, error) {
		return len(service.Ready()) == len(replicas), nil
	})
}

// TestRollingRestartIsInvisible: restarting the replicas one after the
// other, as a Deployment's rolling update does, under 64 concurrent GETs,
// keeps the APIService Available, lets a namespace be deleted, and costs
// the clients no error they would see: a replica told to stop fails
// /readyz and keeps serving until the Service has dropped it, ends its
// watches, and answers what still reaches it 503 with Retry-After, which
// client-go retries.
func TestRollingRestartIsInvisible(t *testing.T) {
	waitAvailable(t)
	waitInService(t)
	avail := sampleAvailability(t)
	l := startLoad(t, readGroup)
	nsGone := namespaceRoundTrip(t, "drill-rolling")
	start := time.Now()
	var readyIn []time.Duration
	for i := range replicas {
		readyIn = append(readyIn, restartReplica(t, i, false))
		waitInService(t)
	}
	took := time.Since(start)
	nsTook, nsErr := nsGone()
	ok, wrong, failed, kinds, _ := l.result()
	avail.stop()
	t.Logf("DRILL rolling restart: injected SIGTERM to each of 2 replicas in turn (%s in all); clients saw %d GETs OK, %d failed (%s), %d wrong; "+
		"APIService unavailable in %d of %d samples; namespace deleted in %s; restarted replicas ready in %s and %s",
		took.Round(100*time.Millisecond), ok, failed, kinds, wrong, len(avail.unavailable()), avail.count(), nsTook.Round(100*time.Millisecond),
		readyIn[0].Round(100*time.Millisecond), readyIn[1].Round(100*time.Millisecond))
	if u := avail.unavailable(); len(u) > 0 {
		t.Errorf("the APIService was not Available during the rolling restart: %+v", u)
	}
	if nsErr != nil {
		t.Error(nsErr)
	}
	// A request that reaches a replica just as it stops accepting them
	// gets 503 with Retry-After, which client-go retries by itself;
	// anything else is a cost the clients would see.
	if k := l.notRetriedByClientGo(); len(k) > 0 || wrong > 0 {
		t.Errorf("a rolling restart cost the clients %d errors (%s) and %d wrong bodies; it should cost none but 503s with Retry-After", failed, kinds, wrong)
	}
}

// TestKillUnderLoadCostsABoundedBurstOf503s: kill -9 of either replica
// under 64 concurrent GETs, and its replacement starting while it is
// down, keep the APIService Available and namespace deletion working.
// The clients never get a wrong body; they see the responses the dead
// replica was sending cut (a reset stream, at most one per client) and
// 503s, which they retry, until the Service drops the dead replica
// within a probe period.
func TestKillUnderLoadCostsABoundedBurstOf503s(t *testing.T) {
	for i := range replicas {
		waitAvailable(t)
		waitInService(t)
		avail := sampleAvailability(t)
		l := startLoad(t, readGroup)
		// Let the load reach a steady state on both replicas' connections.
		framework.Poll(t, "load running", func(context.Context) (bool, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.ok >= 4*loadClients, nil
		})
		nsGone := namespaceRoundTrip(t, "drill-kill-"+replicas[i].Identity)
		killed := time.Now()
		readyIn := restartReplica(t, i, true)
		waitInService(t)
		back := time.Since(killed)
		nsTook, nsErr := nsGone()
		ok, wrong, failed, kinds, window := l.result()
		avail.stop()
		var after time.Duration
		if failed > 0 {
			l.mu.Lock()
			after = l.lastError.Sub(killed)
			l.mu.Unlock()
		}
		t.Logf("DRILL kill -9 %s under %d GETs: clients saw %d OK, %d failed (%s) within %s, the last %s after the kill, %d wrong; "+
			"APIService unavailable in %d of %d samples; namespace deleted in %s; replacement ready in %s, back in the Service %s after the kill",
			replicas[i].Identity, loadClients, ok, failed, kinds, window.Round(10*time.Millisecond), after.Round(10*time.Millisecond), wrong,
			len(avail.unavailable()), avail.count(), nsTook.Round(100*time.Millisecond), readyIn.Round(100*time.Millisecond), back.Round(100*time.Millisecond))
		if u := avail.unavailable(); len(u) > 0 {
			t.Errorf("the APIService was not Available after a kill -9 of one replica: %+v", u)
		}
		if nsErr != nil {
			t.Error(nsErr)
		}
		if wrong > 0 {
			t.Errorf("%d GETs returned a body other than the published bundle", wrong)
		}
		// A kill -9 cuts what its replica was sending (at most one
		// response per client): a process killed cannot answer 503 for
		// what it had begun, and kube-apiserver, having sent the headers,
		// can only reset the stream. Every other error is a 503 until the
		// Service drops the dead replica.
		unavailable, cut, other := l.classes()
		t.Logf("DRILL kill -9 %s: errors by class: %d× 503 (retryable), %d× cut in flight (reset or EOF), %d× other %v",
			replicas[i].Identity, unavailable, cut, len(other), other)
		if len(other) > 0 {
			t.Errorf("clients saw errors other than 503s and responses cut in flight: %s", other)
		}
		if cut > loadClients {
			t.Errorf("%d responses were cut; at most the %d in flight can be", cut, loadClients)
		}
		// The Service drops a dead replica within a probe period; what
		// fails after that is not the kill's doing.
		if after > 2*probePeriod+time.Second {
			t.Errorf("clients still failed %s after the kill; the Service drops a dead replica within %s", after, probePeriod)
		}
	}
}

// TestNamespaceDeletionBaseline measures what deleting a namespace takes
// with nothing injected, the figure the drills compare with.
func TestNamespaceDeletionBaseline(t *testing.T) {
	waitAvailable(t)
	took, err := namespaceRoundTrip(t, "drill-baseline")()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DRILL baseline: a namespace is deleted in %s with nothing injected", took.Round(100*time.Millisecond))
}
