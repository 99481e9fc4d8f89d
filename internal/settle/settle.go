// Package settle calls a function once a burst of work is over: Done after
// each piece of work restarts a quiet period, and the function runs when a
// quiet period passes with no work. bashible-apiserver returns the heap a
// burst of renders and publishes freed to the operating system then,
// instead of keeping it until the collector's background scavenger does.
package settle

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Settler runs its function after a burst of Done calls is over.
type Settler struct {
	clock clock.WithDelayedExecution
	after time.Duration
	fn    func()
	mu    sync.Mutex
	timer clock.Timer
}

// New returns a Settler that calls fn once after has passed on clk since
// the last Done. A nil Settler does nothing.
func New(clk clock.WithDelayedExecution, after time.Duration, fn func()) *Settler {
	return &Settler{clock: clk, after: after, fn: fn}
}

// Done says a piece of work ended: fn runs after the quiet period that
// starts now, unless more work ends before it passes.
func (s *Settler) Done() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A new timer each time rather than Reset: the fake clock of the
	// tests cannot fire a reset AfterFunc timer twice.
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = s.clock.AfterFunc(s.after, s.fn)
}
