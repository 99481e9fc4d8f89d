package bundles

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// running is a Controller runController started, its fake clients, and
// the clocks of what it did.
type running struct {
	c    *Controller
	kube *kubefake.Clientset
	nm   *nmfake.Clientset
	// sandboxed says when each NodeGroupConfiguration's render ended,
	// writes when each Secret was written.
	sandboxed *timedSandbox
	writes    *secretWrites
}

// runController runs a leader with fake clients and a sandboxed renderer
// whose templates may take timeout.
func runController(t *testing.T, timeout time.Duration, groups []string, configs ...*deckhousev1alpha1.NodeGroupConfiguration) *running {
	t.Helper()
	var objects []runtime.Object
	for _, g := range groups {
		objects = append(objects, group(g))
	}
	for _, c := range configs {
		objects = append(objects, c)
	}
	kube := kubefake.NewClientset()
	// The simple clientset: the generated one has no apply schema for our
	// types, so NodeGroup status reports fail here (and are retried); what
	// these tests read is the published Secrets.
	nm := nmfake.NewSimpleClientset(objects...)
	// Reactors are added before the controller runs: the fake clientset
	// does not lock its reactor chain against a concurrent change.
	writes := recordSecretWrites(kube)
	stampResourceVersions(kube)
	statusWritesKeepTheSpec(nm)
	ctx, cancel := context.WithCancel(context.Background())
	renderer, sandboxed := timedSandboxedRenderer(t, timeout, 64<<20)
	c := NewController(ControllerConfig{Kube: kube, NodeMgr: nm, Namespace: testNamespace, Identity: "test",
		Renderer: renderer, Store: NewStore(nil), Metrics: NewMetrics(), Workers: 2,
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &running{c: c, kube: kube, nm: nm, sandboxed: sandboxed, writes: writes}
}

// publishedChecksum is the checksum of group's published bundle, "" when
// there is none.
func publishedChecksum(ctx context.Context, kube *kubefake.Clientset, group string) string {
	s, err := kube.CoreV1().Secrets(testNamespace).Get(ctx, deckhousev1.PublishedBundleSecretPrefix+group, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return s.Annotations[bashiblev1alpha1.ChecksumAnnotation]
}

func waitPublished(t *testing.T, kube *kubefake.Clientset, group string, within time.Duration, ok func(string) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		return ok(publishedChecksum(ctx, kube, group)), nil
	})
	if err != nil {
		t.Fatalf("group %s: no bundle published within %s", group, within)
	}
}

func TestAGroupWithATemplateBombDoesNotDelayAnotherGroupsChange(t *testing.T) {
	// The bomb takes the whole timeout; the timeout is long, so that group
	// b's render and publish (milliseconds on a quiet machine, seconds on a
	// starved one) fit inside it on any machine. Group a starts harmless,
	// so the first publish does not wait for a bomb.
	const timeout = 20 * time.Second
	r := runController(t, timeout, []string{"a", "b"},
		config("bomb.sh", []string{"a"}, "echo a"), config("b.sh", []string{"b"}, "echo b"))
	ctx := context.Background()
	first := ""
	waitPublished(t, r.kube, "b", time.Minute, func(sum string) bool { first = sum; return sum != "" })

	// Group a renders a bomb, which takes the whole timeout, while group b
	// gets a change.
	changed := time.Now()
	for _, change := range []struct{ name, content string }{{"bomb.sh", spinBomb}, {"b.sh", "echo b changed"}} {
		ngc, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, change.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ngc.Spec.Content = change.content
		if _, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, ngc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var second string
	waitPublished(t, r.kube, "b", time.Minute, func(sum string) bool { second = sum; return sum != "" && sum != first })
	published, ok := r.writes.first(deckhousev1.PublishedBundleSecretPrefix+"b", second)
	if !ok {
		t.Fatalf("group b's checksum %s is published, but no write of it was seen", second)
	}
	// Ordering, not a wall-clock margin: b's change must be written
	// while a's bomb still renders (or before it began), whatever the
	// machine's load makes of both.
	bombEnded, ended := r.sandboxed.Ended(spinBomb)
	t.Logf("group b's change was published %s after it was made, while group a's bomb (timeout %s) still rendered: %t",
		published.Sub(changed), timeout, !ended || published.Before(bombEnded))
	if ended && !published.Before(bombEnded) {
		t.Errorf("group b's change was published %s after it was made, only after group a's bomb had rendered for its whole timeout (it ended %s after the change)",
			published.Sub(changed), bombEnded.Sub(changed))
	}
}

// secretWrites records when each Secret was written with each checksum.
type secretWrites struct {
	mu     sync.Mutex
	writes []secretWrite
}

type secretWrite struct {
	name, checksum string
	at             time.Time
}

// recordSecretWrites records every create and update of a Secret that
// kube makes from now on; it must be called before kube is used.
func recordSecretWrites(kube *kubefake.Clientset) *secretWrites {
	w := &secretWrites{}
	write := k8stesting.ObjectReaction(kube.Tracker())
	record := func(a k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := write(a)
		if s, ok := obj.(*corev1.Secret); ok && err == nil {
			w.mu.Lock()
			w.writes = append(w.writes, secretWrite{name: s.Name, checksum: s.Annotations[bashiblev1alpha1.ChecksumAnnotation], at: time.Now()})
			w.mu.Unlock()
		}
		return handled, obj, err
	}
	kube.PrependReactor("create", "secrets", record)
	kube.PrependReactor("update", "secrets", record)
	return w
}

// statusWritesKeepTheSpec makes the simple clientset's UpdateStatus of a
// NodeGroupConfiguration change only the status, as the API's status
// subresource does. Without it the controller's status report, built from
// what its informer last saw, writes that spec back over a test's change
// made meanwhile (seen on a loaded machine: group b's change was lost and
// group a went back to its first content).
func statusWritesKeepTheSpec(nm *nmfake.Clientset) {
	tracker := nm.Tracker()
	gvr := deckhousev1alpha1.SchemeGroupVersion.WithResource("nodegroupconfigurations")
	nm.PrependReactor("update", "nodegroupconfigurations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u, ok := a.(k8stesting.UpdateAction)
		if !ok || u.GetSubresource() != "status" {
			return false, nil, nil
		}
		written := u.GetObject().(*deckhousev1alpha1.NodeGroupConfiguration)
		stored, err := tracker.Get(gvr, "", written.Name)
		if err != nil {
			return true, nil, err
		}
		updated := stored.(*deckhousev1alpha1.NodeGroupConfiguration).DeepCopy()
		updated.Status = *written.Status.DeepCopy()
		if err := tracker.Update(gvr, updated, ""); err != nil {
			return true, nil, err
		}
		return true, updated, nil
	})
}

// first is when the Secret name was first written with checksum.
func (w *secretWrites) first(name, checksum string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.writes {
		if s.name == name && s.checksum == checksum {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func TestReadyDoesNotWaitForARender(t *testing.T) {
	// A long timeout: a wide window for the ordering below, free (the
	// test ends when ready, and stops the bomb with the sandbox).
	r := runController(t, 20*time.Second, []string{"a"}, config("bomb.sh", []string{"a"}, spinBomb))
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return r.c.Ready() == nil, nil
	})
	if err != nil {
		t.Fatalf("never ready: %v", r.c.Ready())
	}
	// Ordering, not a wall-clock margin: ready while the group's bomb
	// still renders (or before it began).
	if ended, ok := r.sandboxed.Ended(spinBomb); ok {
		t.Errorf("ready only after %s, once the group's bad template had rendered for its whole timeout (it ended after %s)", time.Since(start), ended.Sub(start))
	}
}

func TestAConfigurationsStatusWaitsForEveryGroupItSelects(t *testing.T) {
	// Group slow takes a while for each render; group fast does not.
	slow := config("slow.sh", []string{"slow"}, `{{ range until 100000 }}{{ range until 10 }}{{ end }}{{ end }}{{ .nodeGroup.name }}`)
	// Slow's render must finish, however starved the machine: the timeout
	// is far from what it takes on a quiet one (about a second).
	r := runController(t, 2*time.Minute, []string{"fast", "slow"}, slow)
	kube, nm := r.kube, r.nm
	waitPublished(t, kube, "slow", 3*time.Minute, func(sum string) bool { return sum != "" })
	ctx := context.Background()
	broken, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Create(ctx, config("all.sh", []string{"*"}, `{{ fail "not yet" }}`), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every status written for this generation names both groups: none is
	// reported from one group's render while the other's is still running.
	var seen []string
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		ngc, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, "all.sh", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range ngc.Status.Conditions {
			if c.Type == ConditionRendered && c.ObservedGeneration == broken.Generation {
				if len(seen) == 0 || seen[len(seen)-1] != c.Message {
					seen = append(seen, c.Message)
				}
				return c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "fast, slow"), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("all.sh never reported both groups; saw %q", seen)
	}
	if len(seen) != 1 {
		t.Errorf("all.sh's status went through %q", seen)
	}
}

// A configuration fixed one way and broken another gets a RenderFailed
// Event for each failure, through client-go's real events/v1 broadcaster
// (which folds Events that differ only in their note into one series).
func TestEachWayAConfigurationFailsIsItsOwnEvent(t *testing.T) {
	r := runController(t, 10*time.Second, []string{"worker"}, config("broken.sh", []string{"*"}, `{{ fail "the first mistake" }}`))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitEvent := func(want string) {
		t.Helper()
		var notes []string
		err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			evs, err := r.kube.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			notes = notes[:0]
			for _, e := range evs.Items {
				if e.Reason == "RenderFailed" && e.Regarding.Name == "broken.sh" {
					notes = append(notes, e.Note)
				}
			}
			return slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }), nil
		})
		if err != nil {
			t.Fatalf("no RenderFailed Event about broken.sh saying %q; its Events say %q", want, notes)
		}
	}
	waitEvent("the first mistake")
	ngc, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, "broken.sh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ngc.Spec.Content = `{{ fail "the second mistake" }}`
	if _, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, ngc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent("the second mistake")
}
