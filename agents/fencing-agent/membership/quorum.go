package membership

// MinQuorumGroup is the smallest group whose members can outvote a
// partition: with fewer than three expected members a majority is all of
// them (2 of 2) or just the node itself (1 of 1), so a lost peer would
// either stop every node or prove nothing. Such a group falls back to the
// API check alone.
const MinQuorumGroup = 3

// Quorum is what the group's gossip says about this node.
type Quorum int

// The zero value is QuorumLost, so a Quorum nobody computed never keeps a
// watchdog fed.
const (
	// QuorumLost: it sees fewer than a majority.
	QuorumLost Quorum = iota
	// QuorumHeld: this node sees a majority of its group alive, itself
	// included.
	QuorumHeld
	// QuorumTooSmall: the group expects fewer than MinQuorumGroup members;
	// gossip proves nothing and only the API check counts.
	QuorumTooSmall
)

func (q Quorum) String() string {
	switch q {
	case QuorumHeld:
		return "held"
	case QuorumLost:
		return "lost"
	case QuorumTooSmall:
		return "group-too-small"
	}
	return "unknown"
}

// QuorumOf decides the quorum from alive, the members this node sees alive
// (itself included), and expected, the group's expected membership N: held
// when alive >= floor(N/2)+1. Two sides of a partition can never both
// hold it, since two majorities of the same N overlap.
func QuorumOf(alive, expected int) Quorum {
	if expected < MinQuorumGroup {
		return QuorumTooSmall
	}
	if alive >= expected/2+1 {
		return QuorumHeld
	}
	return QuorumLost
}

// CountAlive is how many of the group's expected members are in alive
// (the names gossip reports alive), with self always counted: a member
// gossip knows but the group does not (a node of another group, a node
// already deleted) never adds to a majority.
func CountAlive(self string, alive []string, expected map[string]bool) int {
	n := 0
	seen := map[string]bool{}
	for _, name := range append([]string{self}, alive...) {
		if seen[name] || (name != self && !expected[name]) {
			continue
		}
		seen[name] = true
		n++
	}
	return n
}
