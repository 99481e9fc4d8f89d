package settle

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestRunsOnceAfterTheBurst: ten pieces of work a few milliseconds apart,
// with a quiet period longer than each gap, give one call, after the last.
func TestRunsOnceAfterTheBurst(t *testing.T) {
	var calls atomic.Int32
	called := make(chan time.Time, 10)
	s := New(50*time.Millisecond, func() { calls.Add(1); called <- time.Now() })
	var last time.Time
	for range 10 {
		s.Done()
		last = time.Now()
		time.Sleep(5 * time.Millisecond) // the burst's work, shorter than the quiet period
	}
	at := <-called
	if gap := at.Sub(last); gap < 50*time.Millisecond {
		t.Errorf("called %s after the last piece of work, want at least the quiet period 50ms", gap)
	}
	s.Done()
	<-called
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls for two bursts, want 2", n)
	}
	s.Stop()
	var none *Settler
	none.Done()
	none.Stop()
}
