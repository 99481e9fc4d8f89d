package earlyoom

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// TestSustainedPressureEvictsTheKubeletsChoice: on a node with a
// BestEffort pod far over its (zero) request, a Burstable pod a little
// over its request, a Guaranteed pod within it, a system-node-critical pod
// and the agent's own pod (both using the most), sustained full pressure
// makes the agent delete exactly the BestEffort pod, with an Event on the
// pod and on the node giving the figures. The time from the pressure
// crossing the threshold to the deletion is logged.
func TestSustainedPressureEvictsTheKubeletsChoice(t *testing.T) {
	n := newNode(t, "oom-evict", "workers")
	ns := metav1.NamespaceDefault
	hog := newPod(t, ns, "hog", n.name, podSpec{})
	over := newPod(t, ns, "over", n.name, podSpec{requestMi: 100})
	within := newPod(t, ns, "within", n.name, podSpec{requestMi: 1024, limitMi: 1024})
	critical := newPod(t, ns, "critical", n.name, podSpec{priorityClass: "system-node-critical"})
	if within.Status.QOSClass != corev1.PodQOSGuaranteed || over.Status.QOSClass != corev1.PodQOSBurstable || hog.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("QoS classes %s/%s/%s; the test needs Guaranteed/Burstable/BestEffort", within.Status.QOSClass, over.Status.QOSClass, hog.Status.QOSClass)
	}
	a := startAgent(t, n)
	n.setUsage(t, hog, 800)
	n.setUsage(t, over, 300)
	n.setUsage(t, within, 900)
	n.setUsage(t, critical, 5000)
	n.setUsage(t, a.pod, 5000)

	deleted := watchDeletion(t, hog)
	crossed := time.Now()
	n.setPressure(t, 60, 45)
	at := waitDeleted(t, deleted, hog.Name)
	t.Logf("early-oom deleted the victim %s after the pressure crossed the threshold (sampling every 100 ms, 3 samples needed)", at.Sub(crossed).Round(time.Millisecond))

	for _, who := range []string{hog.Name, n.name} {
		var notes []string
		framework.Poll(t, "the Evicted event about "+who, func(ctx context.Context) (bool, error) {
			notes = f.EventNotes(t, who, "Evicted")
			return len(notes) > 0, nil
		})
		for _, want := range []string{"full avg10=45.00%", "above 30.00%", "800Mi of memory against a request of 0", "QoS BestEffort"} {
			if !strings.Contains(notes[0], want) {
				t.Errorf("the Evicted event about %s says %q; want it to contain %q", who, notes[0], want)
			}
		}
	}
	for _, p := range []*corev1.Pod{over, within, critical, a.pod} {
		got, err := f.Kube.CoreV1().Pods(p.Namespace).Get(framework.Context(t), p.Name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s/%s was deleted too (%v); only %s should be", p.Namespace, p.Name, err, hog.Name)
		}
	}
}

// TestObserveModeReportsAndDeletesNothing: the early-oom ConfigMap puts
// the node's group in Observe mode; under the same pressure the agent
// records WouldEvict Events and counts the would-be victim, and every pod
// stays.
func TestObserveModeReportsAndDeletesNothing(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.EarlyOOMName, Namespace: deckhousev1.Namespace},
		Data:       map[string]string{deckhousev1.EarlyOOMSettingsKey: "groups:\n  observed:\n    mode: Observe\n"},
	}
	if _, err := f.Kube.CoreV1().ConfigMaps(cm.Namespace).Create(framework.Context(t), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().ConfigMaps(cm.Namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	n := newNode(t, "oom-observe", "observed")
	hog := newPod(t, metav1.NamespaceDefault, "observed-hog", n.name, podSpec{})
	other := newPod(t, metav1.NamespaceDefault, "observed-other", n.name, podSpec{requestMi: 100})
	a := startAgent(t, n)
	n.setUsage(t, hog, 800)
	n.setUsage(t, other, 50)
	n.setPressure(t, 60, 45)

	for _, who := range []string{hog.Name, n.name} {
		var notes []string
		framework.Poll(t, "the WouldEvict event about "+who, func(ctx context.Context) (bool, error) {
			notes = f.EventNotes(t, who, "WouldEvict")
			return len(notes) > 0, nil
		})
		if !strings.Contains(notes[0], "observe mode, nothing deleted") || !strings.Contains(notes[0], "800Mi") {
			t.Errorf("the WouldEvict event about %s says %q", who, notes[0])
		}
	}
	framework.Poll(t, "the would_evict metric", func(ctx context.Context) (bool, error) {
		code, body, err := a.Get(ctx, "/metrics")
		return err == nil && code == 200 &&
			strings.Contains(body, `early_oom_actions_total{reason="FullPressure",result="would_evict"} 1`) &&
			strings.Contains(body, `early_oom_victims_total{mode="Observe",qos="BestEffort"} 1`) &&
			strings.Contains(body, `early_oom_mode{mode="Observe"} 1`), nil
	})
	// The metrics are behind delegated authorization; the probes are open.
	if code, _, err := a.GetAs(framework.Context(t), "/metrics", stack.Credentials{}); err != nil || code != 403 {
		t.Errorf("/metrics without credentials answered %d (%v); want 403", code, err)
	}
	if code, _, err := a.GetAs(framework.Context(t), "/readyz", stack.Credentials{}); err != nil || code != 200 {
		t.Errorf("/readyz without credentials answered %d (%v); want 200", code, err)
	}
	if evs := f.EventNotes(t, n.name, "Evicted"); len(evs) > 0 {
		t.Errorf("observe mode recorded Evicted events: %v", evs)
	}
	for _, p := range []*corev1.Pod{hog, other} {
		got, err := f.Kube.CoreV1().Pods(p.Namespace).Get(framework.Context(t), p.Name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			t.Errorf("observe mode deleted pod %s (%v)", p.Name, err)
		}
	}
}

// TestAgentCredentialsAreRefusedOnAnotherNode: the agent's token is bound
// to its pod on node A, and kube-apiserver gives the request the node's
// name as the extra authentication.kubernetes.io/node-name; the admission
// policy lets it delete a pod on A and refuses a pod on B, although RBAC
// allows both.
func TestAgentCredentialsAreRefusedOnAnotherNode(t *testing.T) {
	a := newNode(t, "oom-own", "workers")
	b := newNode(t, "oom-other", "workers")
	pod, token := agentIdentity(t, a)
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: f.CP.APIServerURL, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.CP.CACertPEM()}})

	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(framework.Context(t), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := review.Status.UserInfo
	t.Logf("kube-apiserver authenticates the token bound to pod %s as %s with extra %v", pod.Name, info.Username, info.Extra)
	if got := info.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != a.name {
		t.Fatalf("the token's node-name extra is %v; want [%s] (the policy depends on it)", got, a.name)
	}

	foreign := newPod(t, metav1.NamespaceDefault, "foreign", b.name, podSpec{})
	err = client.CoreV1().Pods(foreign.Namespace).Delete(framework.Context(t), foreign.Name, metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "early-oom may delete only pods bound to its own node (oom-own), not pod default/foreign on oom-other") {
		t.Errorf("deleting a pod on another node as early-oom: %v; want Forbidden by the own-node policy", err)
	}
	if got, err := f.Kube.CoreV1().Pods(foreign.Namespace).Get(framework.Context(t), foreign.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("the pod on the other node was deleted (%v)", err)
	}

	own := newPod(t, metav1.NamespaceDefault, "own", a.name, podSpec{})
	if err := client.CoreV1().Pods(own.Namespace).Delete(framework.Context(t), own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting a pod on its own node as early-oom: %v; want it allowed", err)
	}
}

// watchDeletion reports the time the pod was first seen being deleted (a
// deletionTimestamp, or gone).
// waitDeleted waits for the deletion watchDeletion reports and returns
// when it was seen.
func waitDeleted(t *testing.T, deleted <-chan time.Time, name string) time.Time {
	t.Helper()
	var at time.Time
	framework.Poll(t, "the deletion of "+name, func(context.Context) (bool, error) {
		select {
		case at = <-deleted:
			return true, nil
		default:
			return false, nil
		}
	})
	return at
}

func watchDeletion(t *testing.T, p *corev1.Pod) <-chan time.Time {
	t.Helper()
	w, err := f.Kube.CoreV1().Pods(p.Namespace).Watch(framework.Context(t), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", p.Name).String(), ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	at := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			got, ok := ev.Object.(*corev1.Pod)
			if ok && (ev.Type == watch.Deleted || got.DeletionTimestamp != nil) {
				at <- time.Now()
				return
			}
		}
	}()
	return at
}

// TestManifestsAreAccepted: the DaemonSet and the settings example pass the
// API's validation (a server-side dry run), and the kustomizations that
// list early-oom's files build.
func TestManifestsAreAccepted(t *testing.T) {
	dir := filepath.Join(f.Root, "manifests", deckhousev1.EarlyOOMName)
	f.Kubectl(t, "apply", "--dry-run=server", "-f", filepath.Join(dir, "daemonset.yaml"), "-f", filepath.Join(dir, "settings-example.yaml"))
	for _, k := range []string{dir, filepath.Join(f.Root, "manifests"), filepath.Join(f.Root, "manifests", "monitoring")} {
		out := f.Kubectl(t, "kustomize", k)
		if !strings.Contains(out, "name: "+deckhousev1.EarlyOOMName) {
			t.Errorf("kubectl kustomize %s has no early-oom object", k)
		}
	}
}
