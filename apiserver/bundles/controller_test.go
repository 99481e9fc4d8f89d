package bundles

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// runController runs a leader with fake clients and a sandboxed renderer
// whose templates may take timeout.
func runController(t *testing.T, timeout time.Duration, groups []string, configs ...*deckhousev1alpha1.NodeGroupConfiguration) (*Controller, *kubefake.Clientset, *nmfake.Clientset) {
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
	ctx, cancel := context.WithCancel(context.Background())
	c := NewController(ControllerConfig{Kube: kube, NodeMgr: nm, Namespace: testNamespace, Identity: "test",
		Renderer: sandboxedRenderer(t, timeout, 64<<20), Store: NewStore(nil), Metrics: NewMetrics(), Workers: 2,
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c, kube, nm
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

func waitPublished(t *testing.T, kube *kubefake.Clientset, group string, within time.Duration, ok func(string) bool) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		return ok(publishedChecksum(ctx, kube, group)), nil
	})
	if err != nil {
		t.Fatalf("group %s: no bundle published within %s", group, within)
	}
	return time.Since(start)
}

func TestAGroupWithATemplateBombDoesNotDelayAnotherGroupsChange(t *testing.T) {
	// The bomb takes the whole timeout; the timeout is long, so that group
	// b's render and publish (milliseconds on a quiet machine, seconds on a
	// starved one) fit inside it on any machine. Group a starts harmless,
	// so the first publish does not wait for a bomb.
	const timeout = 20 * time.Second
	_, kube, nm := runController(t, timeout, []string{"a", "b"},
		config("bomb.sh", []string{"a"}, "echo a"), config("b.sh", []string{"b"}, "echo b"))
	ctx := context.Background()
	first := ""
	waitPublished(t, kube, "b", time.Minute, func(sum string) bool { first = sum; return sum != "" })

	// Group a renders a bomb, which takes the whole timeout, while group b
	// gets a change.
	for _, change := range []struct{ name, content string }{{"bomb.sh", spinBomb}, {"b.sh", "echo b changed"}} {
		ngc, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, change.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ngc.Spec.Content = change.content
		if _, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, ngc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	latency := waitPublished(t, kube, "b", time.Minute, func(sum string) bool { return sum != "" && sum != first })
	t.Logf("group b's change was published after %s while group a rendered a template that takes %s", latency, timeout)
	if latency >= timeout {
		t.Errorf("group b's change waited %s, as long as group a's bad template (%s)", latency, timeout)
	}
}

func TestReadyDoesNotWaitForARender(t *testing.T) {
	c, _, _ := runController(t, 5*time.Second, []string{"a"}, config("bomb.sh", []string{"a"}, spinBomb))
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return c.Ready() == nil, nil
	})
	if err != nil {
		t.Fatalf("never ready: %v", c.Ready())
	}
	if took := time.Since(start); took >= 5*time.Second {
		t.Errorf("ready only after %s, as long as the group's bad template", took)
	}
}

func TestAConfigurationsStatusWaitsForEveryGroupItSelects(t *testing.T) {
	// Group slow takes a while for each render; group fast does not.
	slow := config("slow.sh", []string{"slow"}, `{{ range until 100000 }}{{ range until 10 }}{{ end }}{{ end }}{{ .nodeGroup.name }}`)
	// Slow's render must finish, however starved the machine: the timeout
	// is far from what it takes on a quiet one (about a second).
	_, kube, nm := runController(t, 2*time.Minute, []string{"fast", "slow"}, slow)
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
