package settle

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestRunsOnceAfterTheBurst: work ending 40 ms apart, with a quiet period
// of 50 ms, gives no call until 50 ms have passed since the last piece,
// then one; the next burst one more.
func TestRunsOnceAfterTheBurst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	calls := 0
	s := New(clk, 50*time.Millisecond, func() { calls++ })
	for range 5 {
		s.Done()
		clk.Step(40 * time.Millisecond)
	}
	if calls != 0 {
		t.Fatalf("%d calls during the burst, want none", calls)
	}
	clk.Step(10 * time.Millisecond)
	if calls != 1 {
		t.Fatalf("%d calls once the quiet period passed, want 1", calls)
	}
	clk.Step(time.Second)
	s.Done()
	clk.Step(49 * time.Millisecond)
	if calls != 1 {
		t.Fatalf("%d calls 49 ms into the second quiet period, want still 1", calls)
	}
	clk.Step(time.Millisecond)
	if calls != 2 {
		t.Errorf("%d calls after the second burst, want 2", calls)
	}
	var none *Settler
	none.Done()
}
