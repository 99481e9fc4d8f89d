package drills

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// rolloutNodes is how many nodes a rollout drill's group has.
const rolloutNodes = 3

// startRollout makes a group of rolloutNodes converged agents whose
// updates need a drain and take a while to apply, starts a rollout of a
// new configuration and returns once the first node is approved, with a
// Monitor of the group and the new checksum.
func startRollout(t *testing.T, group string) (*framework.Monitor, string, []*framework.Agent) {
	t.Helper()
	f.TestGroup(t, framework.NewGroup(group))
	f.WaitChecksum(t, group, func(sum string) bool { return sum != "" })
	var agents []*framework.Agent
	for i := range rolloutNodes {
		a := f.TestAgent(t, fmt.Sprintf("%s-%d", group, i), group)
		a.ApplyTakes.Store(int64(time.Second))
		a.Disruptive.Store(true)
		agents = append(agents, a)
	}
	f.WaitRolledOut(t, group, f.Checksum(t, group), rolloutNodes)
	m := f.WatchGroup(t, group)
	sum := f.NewConfiguration(t, group, "echo "+group+"\n")
	framework.Poll(t, "the first approval of "+group, func(ctx context.Context) (bool, error) {
		return m.MaxApproved() > 0, nil
	})
	return m, sum, agents
}

// monitorMarker is an annotation only the drills write, to see the
// Monitor catch up.
const monitorMarker = "drills.node-manager.test/marker"

// waitMonitorCaughtUp writes a marker on node and waits until the Monitor
// has seen it, and so every write to the group's Nodes before it.
func waitMonitorCaughtUp(t *testing.T, m *framework.Monitor, node string) {
	t.Helper()
	mark := strconv.FormatInt(time.Now().UnixNano(), 10)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, monitorMarker, mark)
	framework.Poll(t, "the marker on "+node+" written", func(ctx context.Context) (bool, error) {
		_, err := f.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err == nil, nil
	})
	framework.Poll(t, "the Monitor caught up with the marker on "+node, func(context.Context) (bool, error) {
		return m.Annotation(node, monitorMarker) == mark, nil
	})
}

// checkRolledOutOnce waits for the rollout of sum to finish and checks
// that every node was approved exactly once and never two at once.
func checkRolledOutOnce(t *testing.T, m *framework.Monitor, group, sum string, agents []*framework.Agent) {
	t.Helper()
	f.WaitRolledOut(t, group, sum, len(agents))
	m.Check(t, 1)
	for _, a := range agents {
		if n := m.Approvals(a.Name); n != 1 {
			t.Errorf("%s was approved %d times in one rollout; want once", a.Name, n)
		}
	}
}

// published is a group's bundle Secret as published now.
func published(t *testing.T, group string) (rv, sum string) {
	t.Helper()
	var s string
	framework.Poll(t, "the published Secret of "+group, func(ctx context.Context) (bool, error) {
		sec, err := f.Kube.CoreV1().Secrets(deckhousev1.BundlesNamespace).Get(ctx, deckhousev1.PublishedBundleSecretPrefix+group, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		rv, s = sec.ResourceVersion, sec.Annotations[bashiblev1alpha1.ChecksumAnnotation]
		return true, nil
	})
	return rv, s
}

// pids are the processes of the bashible-apiserver replicas and of the
// node-manager-controllers now, by identity.
func pids() map[string]int {
	out := map[string]int{}
	for _, r := range replicas {
		out[r.Identity] = r.PID()
	}
	for _, c := range controllers {
		out[c.Identity] = c.PID()
	}
	return out
}

// controllerTerms is how many terms the suite's node-manager-controllers
// have led so far, together (node_manager_leader_terms_total).
func controllerTerms(t *testing.T) int {
	t.Helper()
	total := 0
	for _, c := range controllers {
		v, _, err := c.Metric(framework.Context(t), "node_manager_leader_terms_total")
		if err != nil {
			t.Fatalf("%s /metrics: %v", c.Identity, err)
		}
		n, _ := strconv.Atoi(v)
		total += n
	}
	return total
}

// checkInformersResumed checks that no process of node-manager restarted
// or exited — neither bashible-apiserver replica, nor node-manager-
// controller, which on a Lease it could not renew ends its term and
// stands by again in the same process — and that each replica, asked
// directly, serves a group created after the fault: its informers
// (NodeGroups, and the Secrets the leader publishes) resumed by
// themselves.
func checkInformersResumed(t *testing.T, before map[string]int, witness string) {
	t.Helper()
	after := pids()
	for _, r := range replicas {
		if r.Exited() || after[r.Identity] != before[r.Identity] {
			t.Errorf("bashible-apiserver %s restarted or exited during the drill", r.Identity)
		}
	}
	for _, c := range controllers {
		if c.Exited() || after[c.Identity] != before[c.Identity] {
			t.Errorf("node-manager-controller %s restarted or exited during the drill", c.Identity)
		}
	}
	f.TestGroup(t, framework.NewGroup(witness))
	for _, r := range replicas {
		framework.Poll(t, r.Identity+" serves group "+witness, func(ctx context.Context) (bool, error) {
			code, _, err := r.Get(ctx, "/apis/"+bashiblev1alpha1.GroupName+"/v1alpha1/nodegroupbundles/"+witness)
			return err == nil && code == 200, nil
		})
	}
}

// controlPlaneDrill restarts a control-plane component mid-rollout.
func controlPlaneDrill(t *testing.T, group, what string, restart func(context.Context) error) {
	waitAvailable(t)
	m, sum, agents := startRollout(t, group)
	before := pids()
	termsBefore := controllerTerms(t)
	holders := recordHolders(t, deckhousev1.Namespace, deckhousev1.NodeManagerControllerName)
	rv, publishedSum := published(t, group)
	if publishedSum != sum {
		t.Fatalf("published checksum %s, served %s", publishedSum, sum)
	}
	// The nodes' agents wait while the API is away (they could not reach
	// it anyway) and until the Monitor has caught up after it: an informer
	// that relists after a restart delivers the nodes one by one, so
	// updates made while it was backing off would look like two nodes
	// approved at once, or an approval never seen. The controller is not
	// paused: whatever it does meanwhile is seen.
	for _, a := range agents {
		a.Paused.Store(true)
	}
	start := time.Now()
	if err := restart(framework.Context(t)); err != nil {
		t.Fatalf("restart %s: %v", what, err)
	}
	restarted := time.Since(start)
	waitMonitorCaughtUp(t, m, agents[0].Name)
	for _, a := range agents {
		a.Paused.Store(false)
	}
	checkRolledOutOnce(t, m, group, sum, agents)
	rolledOut := time.Since(start)
	if rv2, sum2 := published(t, group); rv2 != rv || sum2 != sum {
		t.Errorf("the published Secret of %s changed across the restart: resourceVersion %s → %s, checksum %.12s → %.12s", group, rv, rv2, sum, sum2)
	}
	if got := f.Checksum(t, group); got != sum {
		t.Errorf("%s is served with checksum %.12s after the restart; %.12s before", group, got, sum)
	}
	holders.stop()
	checkInformersResumed(t, before, group+"-witness")
	// The API was away for longer than the controllers' renew deadline:
	// the leader's term ended, and the rollout was finished by a new
	// term of a process that had not exited.
	newTerms := controllerTerms(t) - termsBefore
	if restarted > controllerRenewDeadline && newTerms < 1 {
		t.Errorf("the API was away %s, longer than the %s renew deadline, yet no node-manager-controller began a new term", restarted, controllerRenewDeadline)
	}
	t.Logf("DRILL %s restart mid-rollout (%d nodes, drains): down and back in %s; rollout finished %s after the restart began, "+
		"each node approved once, published Secret and checksum unchanged; every process of node-manager kept running and resumed its informers "+
		"(node-manager-controller: %d new terms without a restart, Lease holders during the drill %v)",
		what, rolloutNodes, restarted.Round(100*time.Millisecond), rolledOut.Round(100*time.Millisecond), newTerms, holders.all())
}

// TestEtcdRestartMidRollout: etcd restarts (its data kept) while a
// rollout is under way.
func TestEtcdRestartMidRollout(t *testing.T) {
	controlPlaneDrill(t, "drill-etcd", "etcd", f.CP.RestartEtcd)
}

// TestKubeAPIServerRestartMidRollout: kube-apiserver restarts while a
// rollout is under way; every client must reconnect.
func TestKubeAPIServerRestartMidRollout(t *testing.T) {
	controlPlaneDrill(t, "drill-kapi", "kube-apiserver", f.CP.RestartAPIServer)
}
