package membership

import "testing"

func TestQuorumIsAStrictMajorityOfTheExpectedMembers(t *testing.T) {
	for _, tc := range []struct {
		alive, expected int
		want            Quorum
	}{
		{alive: 0, expected: 0, want: QuorumTooSmall},
		{alive: 1, expected: 1, want: QuorumTooSmall},
		{alive: 2, expected: 2, want: QuorumTooSmall},
		{alive: 1, expected: 2, want: QuorumTooSmall},
		{alive: 3, expected: 3, want: QuorumHeld},
		{alive: 2, expected: 3, want: QuorumHeld},
		{alive: 1, expected: 3, want: QuorumLost},
		{alive: 3, expected: 4, want: QuorumHeld},
		{alive: 2, expected: 4, want: QuorumLost}, // a 2/2 split: neither side holds it
		{alive: 3, expected: 5, want: QuorumHeld},
		{alive: 2, expected: 5, want: QuorumLost},
		{alive: 4, expected: 6, want: QuorumHeld},
		{alive: 3, expected: 6, want: QuorumLost},
		{alive: 51, expected: 100, want: QuorumHeld},
		{alive: 50, expected: 100, want: QuorumLost},
		{alive: 7, expected: 5, want: QuorumHeld}, // more alive than the cache knows: new nodes
	} {
		if got := QuorumOf(tc.alive, tc.expected); got != tc.want {
			t.Errorf("QuorumOf(alive=%d, expected=%d) = %v, want %v", tc.alive, tc.expected, got, tc.want)
		}
	}
}

func TestTwoSidesOfAPartitionNeverBothHoldQuorum(t *testing.T) {
	for n := MinQuorumGroup; n <= 50; n++ {
		for a := 0; a <= n; a++ {
			if QuorumOf(a, n) == QuorumHeld && QuorumOf(n-a, n) == QuorumHeld {
				t.Fatalf("a %d/%d split of %d: both sides hold quorum", a, n-a, n)
			}
		}
	}
}

func TestOnlyTheGroupsMembersCountAndSelfAlways(t *testing.T) {
	expected := map[string]bool{"a": true, "b": true, "c": true}
	for _, tc := range []struct {
		name  string
		alive []string
		want  int
	}{
		{"alone", nil, 1},
		{"self reported too", []string{"a"}, 1},
		{"all", []string{"a", "b", "c"}, 3},
		{"a stranger does not count", []string{"a", "b", "x"}, 2},
		{"duplicates count once", []string{"b", "b"}, 2},
	} {
		if got := CountAlive("a", tc.alive, expected); got != tc.want {
			t.Errorf("%s: CountAlive = %d, want %d", tc.name, got, tc.want)
		}
	}
}
