// Package settle calls a function once a burst of work is over: Done after
// each piece of work restarts a quiet period, and the function runs when a
// quiet period passes with no work. bashible-apiserver returns the heap a
// burst of renders and publishes freed to the operating system then,
// instead of keeping it until the collector's background scavenger does.
package settle

import (
	"sync"
	"time"
)

// Settler runs its function After a burst of Done calls is over.
type Settler struct {
	after time.Duration
	fn    func()
	mu    sync.Mutex
	timer *time.Timer
}

// New returns a Settler that calls fn once after has passed since the
// last Done; a nil Settler does nothing.
func New(after time.Duration, fn func()) *Settler {
	return &Settler{after: after, fn: fn}
}

// Done says a piece of work ended: fn runs after the quiet period that
// starts now, unless more work ends before it passes.
func (s *Settler) Done() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer == nil {
		s.timer = time.AfterFunc(s.after, s.fn)
		return
	}
	s.timer.Reset(s.after)
}

// Stop cancels a pending call.
func (s *Settler) Stop() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
}
