package bootstraptokens

import (
	"time"
)

// wake is a pending clock timer that queues a group again.
type wake struct {
	at     time.Time
	cancel chan struct{}
}

// schedule queues group again at time at, replacing its pending wakeup;
// a zero at only cancels it. The timer runs on the injected clock.
func (c *Controller) schedule(group string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w, ok := c.wakeup[group]; ok {
		if w.at.Equal(at) {
			return
		}
		close(w.cancel)
		delete(c.wakeup, group)
	}
	if at.IsZero() {
		return
	}
	delay := at.Sub(c.d.Clock.Now())
	if delay <= 0 {
		c.queue.Add(group)
		return
	}
	w := &wake{at: at, cancel: make(chan struct{})}
	c.wakeup[group] = w
	timer := c.d.Clock.NewTimer(delay)
	go func() {
		defer timer.Stop()
		select {
		case <-timer.C():
			c.mu.Lock()
			if c.wakeup[group] == w {
				delete(c.wakeup, group)
			}
			c.mu.Unlock()
			c.queue.Add(group)
		case <-w.cancel:
		}
	}()
}

func (c *Controller) stopWakeups() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for group, w := range c.wakeup {
		close(w.cancel)
		delete(c.wakeup, group)
	}
}

// pending reports when group is due to be queued again (tests).
func (c *Controller) pending(group string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.wakeup[group]
	if !ok {
		return time.Time{}, false
	}
	return w.at, true
}
