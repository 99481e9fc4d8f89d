package evict

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/node-manager/node-manager/agents/early-oom/detect"
	"github.com/node-manager/node-manager/agents/early-oom/psi"
	"github.com/node-manager/node-manager/agents/early-oom/rank"
)

func victim(grace int64) rank.Candidate {
	return rank.Candidate{
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hog", Namespace: "default", UID: "uid-hog"},
			Spec:       corev1.PodSpec{NodeName: "n1", TerminationGracePeriodSeconds: &grace},
		},
		Usage: 800 << 20, Request: 100 << 20, Priority: 0, QoS: corev1.PodQOSBurstable,
	}
}

var evidence = Evidence{
	Reason:     detect.FullPressure,
	Sample:     detect.Sample{Pressure: psi.Pressure{Full: psi.Averages{Avg10: 45}, Some: psi.Averages{Avg10: 60}}, Available: 512 << 20},
	Thresholds: detect.Thresholds{FullAvg10: 30, Samples: 3},
}

// TestEvictDeletesWithAShortGraceAndTheUIDAndSaysWhyOnPodAndNode.
func TestEvictDeletesWithAShortGraceAndTheUIDAndSaysWhyOnPodAndNode(t *testing.T) {
	for _, tc := range []struct {
		own, want int64
	}{{30, 5}, {2, 2}} {
		v := victim(tc.own)
		client := fake.NewClientset(v.Pod)
		var opts metav1.DeleteOptions
		client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			opts = a.(k8stesting.DeleteActionImpl).DeleteOptions
			return false, nil, nil
		})
		rec := events.NewFakeRecorder(4)
		e := &Evictor{Client: client, Recorder: rec, Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, GracePeriod: 5 * time.Second}
		if err := e.Evict(context.Background(), v, evidence); err != nil {
			t.Fatal(err)
		}
		if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != tc.want {
			t.Errorf("own grace %ds: deleted with %v; want %ds", tc.own, opts.GracePeriodSeconds, tc.want)
		}
		if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != "uid-hog" {
			t.Errorf("deleted without the pod's UID as a precondition: %+v", opts.Preconditions)
		}
		for i := 0; i < 2; i++ {
			ev := <-rec.Events
			for _, want := range []string{"Warning Evicted", "full avg10=45.00% above 30.00% for 3 samples", "some avg10=60.00%", "MemAvailable 512Mi", "uses 800Mi of memory against a request of 100Mi", "QoS Burstable"} {
				if !strings.Contains(ev, want) {
					t.Errorf("event %q does not contain %q", ev, want)
				}
			}
		}
	}
}

func TestReportDeletesNothingAndSaysWouldEvict(t *testing.T) {
	v := victim(30)
	client := fake.NewClientset(v.Pod)
	rec := events.NewFakeRecorder(4)
	e := &Evictor{Client: client, Recorder: rec, Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	e.Report(v, evidence)
	for i := 0; i < 2; i++ {
		if ev := <-rec.Events; !strings.HasPrefix(ev, "Normal WouldEvict") || !strings.Contains(ev, "nothing deleted") {
			t.Errorf("event %q; want Normal WouldEvict saying nothing was deleted", ev)
		}
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("observe mode sent %v", a)
		}
	}
}
