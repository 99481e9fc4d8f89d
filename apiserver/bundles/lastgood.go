package bundles

import "sync"

// lastGood remembers each group's last good bundle: the one the leader
// rewrites when the group's published Secret was changed or deleted by
// someone else while the group's current render cannot replace it (the
// render fails, or its bundle is too large to publish).
//
// What counts as good depends on who this replica is:
//   - a follower takes every bundle the store loads and verifies, which is
//     what the leader publishes (the namespace is bashible-apiserver's
//     alone), so after a failover the new leader restores the same bundle
//     the previous one would have;
//   - the leader takes only what it writes itself: during its term it is
//     the only legitimate writer, so any other change seen in the store is
//     tampering to be undone, never a new last good bundle.
type lastGood struct {
	mu      sync.Mutex
	leading bool
	bundles map[string]*Published
}

func newLastGood() *lastGood { return &lastGood{bundles: map[string]*Published{}} }

// observed is the store's change hook (cur nil: the Secret was deleted).
func (l *lastGood) observed(old, cur *Published) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		return
	}
	switch {
	case cur != nil:
		l.bundles[cur.Group] = cur
	case old != nil:
		// The leader deleted it because the group is gone (the controller
		// passes on no deletion of a group that still exists).
		delete(l.bundles, old.Group)
	}
}

// setLeading switches between the follower's and the leader's rule.
func (l *lastGood) setLeading(leading bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading = leading
}

// wrote records a bundle the leader published (or found already published).
func (l *lastGood) wrote(p *Published) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bundles[p.Group] = p
}

// forget drops a group whose NodeGroup is gone.
func (l *lastGood) forget(group string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.bundles, group)
}

// get returns the group's last good bundle, nil when there is none.
func (l *lastGood) get(group string) *Published {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bundles[group]
}
