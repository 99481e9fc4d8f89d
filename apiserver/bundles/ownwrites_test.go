package bundles

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ownSecret(rv, content string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", ResourceVersion: rv},
		Data:       map[string][]byte{"k": []byte(content)},
	}
}

// TestALaggingInformerShowsTheLeadersOwnWrite: until the informer shows a
// write, what it replaced counts as the write; anything else the informer
// shows is taken as it is.
func TestALaggingInformerShowsTheLeadersOwnWrite(t *testing.T) {
	now := time.Unix(1000, 0)
	var rechecks []time.Duration
	o := newOwnWrites(func(after time.Duration) { rechecks = append(rechecks, after) })
	o.now = func() time.Time { return now }
	old, ours := ownSecret("1", "old"), ownSecret("2", "ours")
	content := func(s *corev1.Secret) string {
		if s == nil {
			return "<none>"
		}
		return s.ResourceVersion + ":" + string(s.Data["k"])
	}
	expect := func(what string, shown, want *corev1.Secret) {
		t.Helper()
		if got := o.current("s", shown); content(got) != content(want) {
			t.Errorf("%s: the Secret holds %s, want %s", what, content(got), content(want))
		}
	}

	expect("nothing written", old, old)

	o.wrote("s", old, old, ours)
	expect("the informer still shows what the write replaced", old, ours)
	expect("the informer shows the write", ours, ours)
	expect("after the write was shown, the old content again is someone's change", old, old)

	o.wrote("s", nil, nil, ours)
	expect("a create the informer does not show yet", nil, ours)
	o.observed(ownSecret("2", "ours"))
	expect("a create the informer showed, then deleted", nil, nil)

	o.wrote("s", old, old, ours)
	expect("a third content is someone's change", ownSecret("3", "theirs"), ownSecret("3", "theirs"))
	expect("and ends the wait", old, old)

	o.wrote("s", old, old, ours)
	expect("the old content at a newer resourceVersion is someone's change", ownSecret("3", "old"), ownSecret("3", "old"))

	newer := ownSecret("3", "newer")
	o.wrote("s", old, old, ours)
	o.wrote("s", old, ours, newer)
	expect("two writes, neither shown", old, newer)
	expect("two writes, the first shown", ours, newer)
	expect("two writes, the second shown", newer, newer)

	// A wait ends with a publish: a change the informer missed is seen then.
	o.wrote("s", old, old, ours)
	rechecks = nil
	now = now.Add(ownWriteWait / 3)
	expect("a third into the wait", old, ours)
	if len(rechecks) != 1 || rechecks[0] != ownWriteWait-ownWriteWait/3 {
		t.Errorf("rechecks %v, want one at the end of the wait, %s", rechecks, ownWriteWait-ownWriteWait/3)
	}
	now = now.Add(ownWriteWait)
	expect("an informer that shows the old content for longer is believed", old, old)

	// The informer showed the first write while the second was being made
	// from it (the record ended); it may still show the first.
	o.wrote("s", old, old, ours)
	o.observed(ownSecret("2", "ours"))
	o.wrote("s", old, ours, newer)
	expect("the base of the second write, shown after its record ended", ours, newer)

	// Deleted to be created again (an immutable Secret replaced).
	o.wrote("s", old, nil, ours)
	expect("the deletion before the create", nil, ours)
	expect("what was deleted", old, ours)

	o.wrote("s", old, old, ours)
	o.forget("s")
	expect("a forgotten write", old, old)
}
