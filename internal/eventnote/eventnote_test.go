package eventnote

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// record sends notes about one Node through client-go's real events/v1
// broadcaster, each with the action action(note), and returns what the
// API got: each Event's note and series count.
func record(t *testing.T, action func(note string) string, notes ...string) map[string]int32 {
	t.Helper()
	kube := kubefake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, "test")
	node := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "worker-0", UID: "u1"}
	got := map[string]int32{}
	for i, note := range notes {
		recorder.Eventf(node, nil, corev1.EventTypeWarning, "Failed", action(note), "%s", note)
		// Each is recorded before the next is sent, as when failures
		// come minutes apart.
		err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			list, err := kube.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			clear(got)
			total := int32(0)
			for _, e := range list.Items {
				n := int32(1)
				if e.Series != nil {
					n = e.Series.Count
				}
				got[e.Note] += n
				total += n
			}
			return int(total) == i+1, nil
		})
		if err != nil {
			return got
		}
	}
	return got
}

func TestADifferentNoteIsANewEventAndTheSameNoteCountsUp(t *testing.T) {
	got := record(t, func(note string) string { return Action("Render", note) }, "first", "second", "second")
	if got["first"] != 1 || got["second"] != 2 || len(got) != 2 {
		t.Errorf("the API holds %v, want first once and second twice", got)
	}
	// Without the digest, client-go folds the second note into the first.
	folded := record(t, func(string) string { return "Render" }, "first", "second")
	if _, ok := folded["second"]; ok {
		t.Errorf("with one action client-go kept both notes (%v): the digest is no longer needed", folded)
	}
}

func TestTheActionIsTheBaseAndADigestOfTheNote(t *testing.T) {
	a, b := Action("Render", "one"), Action("Render", "two")
	if a == b || a != Action("Render", "one") || len(a) != len("Render/")+8 || a[:7] != "Render/" {
		t.Errorf("Action gave %q and %q", a, b)
	}
}
