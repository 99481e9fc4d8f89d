package bashible

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

const checksumAnnotation = deckhousev1.ConfigurationChecksumAnnotation

// newNode creates a simulated node in group with bashible.sh installed, as
// after bootstrap: its next run is its first.
func newNode(t *testing.T, name, group string) *stack.SimNode {
	t.Helper()
	n, err := stack.NewSimNode(framework.Context(t), f.CP, t.TempDir(), name, group)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.FetchAgent(framework.Context(t), f.CP); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustRun(t *testing.T, n *stack.SimNode, args ...string) stack.Run {
	t.Helper()
	run, err := n.RunOnce(framework.Context(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	if run.ExitCode != 0 {
		t.Fatalf("bashible on %s exited %d:\n%s", n.Name, run.ExitCode, run.Output)
	}
	return run
}

func annotations(t *testing.T, n *stack.SimNode) map[string]string {
	t.Helper()
	a, err := n.Annotations(framework.Context(t), f.CP)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func instanceCondition(t *testing.T, node, condType string) *metav1.Condition {
	t.Helper()
	inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(framework.Context(t), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(inst.Status.Conditions, condType)
}

// ownGroup creates a Static NodeGroup with the approval mode for one test
// and waits until its bundle is served. A test that changes its group's
// configuration runs on a group of its own, so that the tests running
// beside it (t.Parallel) keep the configuration of theirs.
func ownGroup(t *testing.T, name string, mode deckhousev1.ApprovalMode) string {
	t.Helper()
	var typ func(*deckhousev1.NodeGroup)
	if mode == deckhousev1.ApprovalRollingUpdate {
		// The API refuses RollingUpdate outside CloudEphemeral, as Deckhouse does.
		typ = framework.OfType(deckhousev1.NodeTypeCloudEphemeral)
	}
	f.TestGroup(t, framework.NewGroup(name, typ, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: mode}
	}))
	f.WaitChecksum(t, name, func(sum string) bool { return sum != "" })
	return name
}

// changeBundle adds a NodeGroupConfiguration of weight 40 for group and
// waits until the group serves a new checksum.
func changeBundle(t *testing.T, name, group, content string) string {
	t.Helper()
	return changeBundleWeight(t, name, group, 40, content)
}

func changeBundleWeight(t *testing.T, name, group string, weight int32, content string) string {
	t.Helper()
	before := f.Checksum(t, group)
	f.TestConfiguration(t, name, deckhousev1alpha1.NodeGroupConfigurationSpec{NodeGroups: []string{group}, Bundles: []string{"*"}, Weight: weight, Content: content})
	return f.WaitChecksum(t, group, func(sum string) bool { return sum != before })
}

func TestFirstRunConvergesWithoutApproval(t *testing.T) {
	t.Parallel()
	n := newNode(t, "first-1", "sim")
	run := mustRun(t, n)
	want := f.Checksum(t, "sim")
	if got := annotations(t, n)[checksumAnnotation]; got != want {
		t.Fatalf("checksum annotation %q, want %q\n%s", got, want, run.Output)
	}
	if strings.TrimSpace(n.Read("var/lib/bashible/configuration_checksum")) != want || n.Read("applied-group") != "sim\n" {
		t.Errorf("node files: checksum %q, applied-group %q", n.Read("var/lib/bashible/configuration_checksum"), n.Read("applied-group"))
	}
	if n.Exists("var/lib/bashible/first_run") {
		t.Error("first_run must be removed after the first successful run")
	}
	if !strings.Contains(n.Read("etc/systemd/system/bashible.timer"), "OnUnitInactiveSec=1min") {
		t.Error("the bashible timer unit should be installed by its step")
	}
	if c := instanceCondition(t, n.Name, "BashibleReady"); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "StepsCompleted" {
		t.Errorf("Instance BashibleReady: %+v", c)
	}
	// One Event for the run; the steps are in the Instance's lastRun
	// (TestStepHistoryIsReportedOnTheInstance).
	if notes := f.EventNotes(t, n.Name, "BashibleConverged"); len(notes) != 1 || !strings.Contains(notes[0], "applied: ") || !strings.Contains(notes[0], " steps in ") {
		t.Errorf("BashibleConverged events: %q, want one that says how many steps ran", notes)
	}
	// Deckhouse's start and finish of the run, in namespace default.
	if notes := f.EventNotes(t, n.Name, "BashibleNodeUpdate"); !slices.Equal(slices.Sorted(slices.Values(notes)),
		[]string{"finish steps update on " + n.Name, "start steps update on " + n.Name}) {
		t.Errorf("BashibleNodeUpdate events: %q, want Deckhouse's start and finish of the run", notes)
	}
	if _, ok := annotations(t, n)[deckhousev1.WaitingForApprovalAnnotation]; ok {
		t.Error("a first run must not ask for approval")
	}

	// In sync: the next run changes nothing.
	applied := n.Read("applied-checksums")
	run = mustRun(t, n)
	if n.Read("applied-checksums") != applied || !strings.Contains(run.Output, "nothing to do") && !strings.Contains(run.Output, "") {
		t.Errorf("a run in sync must not run steps:\n%s", run.Output)
	}
}

func TestUpdateWaitsForApprovalNodeByNode(t *testing.T) {
	t.Parallel()
	group := ownGroup(t, "appr", deckhousev1.ApprovalManual)
	nodes := []*stack.SimNode{newNode(t, "appr-1", group), newNode(t, "appr-2", group), newNode(t, "appr-3", group)}
	for _, n := range nodes {
		mustRun(t, n)
	}
	old := f.Checksum(t, group)
	next := changeBundle(t, "approval-probe.sh", group, "echo probe\n")

	type running struct {
		cmd *exec.Cmd
		out fmt.Stringer
	}
	runs := map[string]running{}
	for _, n := range nodes {
		cmd, out, err := n.Start(framework.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		runs[n.Name] = running{cmd, out}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	for _, n := range nodes {
		framework.Poll(t, n.Name+" asks for approval", func(ctx context.Context) (bool, error) {
			a, err := n.Annotations(ctx, f.CP)
			if err != nil {
				return false, err
			}
			_, waiting := a[deckhousev1.WaitingForApprovalAnnotation]
			_, stillUpToDate := a[checksumAnnotation]
			return waiting && !stillUpToDate, nil
		})
		framework.Poll(t, n.Name+" reports WaitingApproval on its Instance", func(context.Context) (bool, error) {
			c := instanceCondition(t, n.Name, "WaitingApproval")
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
	}
	empty := ""
	if err := nodes[1].Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.ApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	if err := runs["appr-2"].cmd.Wait(); err != nil {
		t.Fatalf("the approved node's run: %v\n%s", err, runs["appr-2"].out)
	}
	if got := annotations(t, nodes[1])[checksumAnnotation]; got != next {
		t.Errorf("the approved node reports %q, want %q", got, next)
	}
	// Each condition keeps its own field manager: setting one never drops another.
	if a, b := instanceCondition(t, "appr-2", "WaitingApproval"), instanceCondition(t, "appr-2", "BashibleReady"); a == nil || a.Status != metav1.ConditionFalse || b == nil || b.Status != metav1.ConditionTrue {
		t.Errorf("Instance conditions after approval: WaitingApproval %+v, BashibleReady %+v", a, b)
	}
	time.Sleep(2 * time.Second)
	for _, n := range []*stack.SimNode{nodes[0], nodes[2]} {
		if _, ok := annotations(t, n)[checksumAnnotation]; ok {
			t.Errorf("%s was not approved but reports a checksum", n.Name)
		}
		if strings.Contains(n.Read("applied-checksums"), next) {
			t.Errorf("%s was not approved but applied %s", n.Name, next)
		}
		if strings.TrimSpace(n.Read("var/lib/bashible/configuration_checksum")) != old {
			t.Errorf("%s: its stored checksum moved without approval", n.Name)
		}
	}
}

func TestFailingStepIsRetriedReportedAndFailsTheRun(t *testing.T) {
	t.Parallel()
	n := newNode(t, "fail-1", "sim")
	if err := n.Control("fail", true); err != nil {
		t.Fatal(err)
	}
	run, err := n.RunOnce(framework.Context(t), "--max-retries", "3")
	if err != nil {
		t.Fatal(err)
	}
	if run.ExitCode == 0 {
		t.Fatalf("a run with a failing step succeeded:\n%s", run.Output)
	}
	if !strings.Contains(run.Output, "attempt 3 of 3") || strings.Contains(run.Output, "attempt 4") {
		t.Errorf("want exactly three attempts:\n%s", run.Output)
	}
	log := n.Read("var/lib/bashible/step.failed.log")
	if !strings.Contains(log, "failing on demand") || !strings.Contains(log, "+ ") {
		t.Errorf("step.failed.log should keep the output, traced on the third attempt:\n%s", log)
	}
	if !strings.Contains(log, "+ bb-kube-api") || strings.Contains(log, "--cert") || strings.Contains(log, "Authorization") {
		t.Errorf("a traced step shows its API calls but never their credentials:\n%s", log)
	}
	if notes := f.EventNotes(t, n.Name, "BashibleStepFailed"); len(notes) != 3 || !strings.Contains(notes[0], "failing on demand") {
		t.Errorf("want three failure events with the output: %v", notes)
	}
	if c := instanceCondition(t, n.Name, "BashibleReady"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "StepsFailed" {
		t.Errorf("Instance BashibleReady: %+v", c)
	}
	if _, ok := annotations(t, n)[checksumAnnotation]; ok || n.Exists("var/lib/bashible/configuration_checksum") {
		t.Error("a failed run must not record a checksum")
	}
	// Fixed, the next run converges.
	if err := n.Control("fail", false); err != nil {
		t.Fatal(err)
	}
	mustRun(t, n)
	if annotations(t, n)[checksumAnnotation] != f.Checksum(t, "sim") {
		t.Error("after the fix the node should converge")
	}
}

func TestHungStepIsKilledAndTheLockReleased(t *testing.T) {
	t.Parallel()
	n := newNode(t, "hang-1", "sim")
	n.Env = []string{"BASHIBLE_STEP_TIMEOUT=2"}
	if err := n.Control("hang", true); err != nil {
		t.Fatal(err)
	}
	run, err := n.RunOnce(framework.Context(t), "--max-retries", "1")
	if err != nil {
		t.Fatal(err)
	}
	if run.ExitCode == 0 || !strings.Contains(run.Output, "killed after its timeout of 2s") {
		t.Fatalf("a hung step must be killed and reported (exit %d):\n%s", run.ExitCode, run.Output)
	}
	if run.Took > 30*time.Second {
		t.Errorf("the run took %s", run.Took)
	}
	if notes := f.EventNotes(t, n.Name, "BashibleStepFailed"); len(notes) == 0 || !strings.Contains(notes[0], "timeout") {
		t.Errorf("the timeout should be reported: %v", notes)
	}
	if err := n.Control("hang", false); err != nil {
		t.Fatal(err)
	}
	// The lock was released: a run with the default step timeout (a
	// loaded machine takes longer than 2 s for real steps) converges.
	n.Env = nil
	mustRun(t, n)
}

func TestConcurrentRunsOneRunsOneExits(t *testing.T) {
	t.Parallel()
	n := newNode(t, "lock-1", "sim")
	if err := n.Control("slow", true); err != nil {
		t.Fatal(err)
	}
	first, out, err := n.Start(framework.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the first run holds the lock", func(context.Context) (bool, error) {
		return n.Exists("var/lib/bashible/bundle_steps"), nil
	})
	second := mustRun(t, n)
	if !strings.Contains(second.Output, "another run holds") {
		t.Errorf("the second run should exit quietly:\n%s", second.Output)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("the first run: %v\n%s", err, out)
	}
}

func TestARebootForcesAConvergeWithoutApproval(t *testing.T) {
	t.Parallel()
	n := newNode(t, "reboot-1", "sim")
	mustRun(t, n)
	applied := strings.Count(n.Read("applied-checksums"), "\n")
	mustRun(t, n)
	if got := strings.Count(n.Read("applied-checksums"), "\n"); got != applied {
		t.Fatalf("a run in sync ran the steps (%d → %d)", applied, got)
	}
	// A reboot since the last run (a new boot id) forces one; nothing in it
	// disrupts, so it needs no approval.
	if err := n.Write("proc/sys/kernel/random/boot_id", "00000000-0000-4000-8000-000000000002\n"); err != nil {
		t.Fatal(err)
	}
	mustRun(t, n)
	if got := strings.Count(n.Read("applied-checksums"), "\n"); got != applied+1 {
		t.Errorf("a reboot should force a converge (%d → %d)", applied, got)
	}
	if _, asked := annotations(t, n)[deckhousev1.WaitingForApprovalAnnotation]; asked {
		t.Error("a converge after a reboot asked for approval without a disruption")
	}
}

// rebootsBy makes the node's reboot command count its calls and give the
// machine a new boot id, as a real reboot does; before, it copies the
// recorded checksum to rebooted-with.
func rebootsBy(t *testing.T, n *stack.SimNode) {
	t.Helper()
	script := `echo reboot >> "$1/reboots"
cp "$1/var/lib/bashible/configuration_checksum" "$1/rebooted-with"
printf '00000000-0000-4000-8000-%012d\n' "$(( $(wc -l < "$1/reboots") + 100 ))" > "$1/proc/sys/kernel/random/boot_id"
`
	if err := n.Write("reboot.sh", script); err != nil {
		t.Fatal(err)
	}
	n.Env = append(n.Env, "BASHIBLE_REBOOT_COMMAND=bash "+n.Path("reboot.sh")+" "+n.Root)
}

// The reboot annotation is an update: the node asks for approval, then for
// a disruption, reboots once as the run's last action, and reports (and
// clears the request) only from the run after the reboot.
func TestRebootRequestIsApprovedDisruptedThenRebootsOnceAndIsCleared(t *testing.T) {
	t.Parallel()
	n := newNode(t, "reboot-3", "sim")
	mustRun(t, n)
	sum := f.Checksum(t, "sim")
	rebootsBy(t, n)
	empty := ""
	if err := n.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.RebootAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	cmd, out, err := n.Start(framework.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	has := func(ctx context.Context, key string) (bool, error) {
		a, err := n.Annotations(ctx, f.CP)
		_, ok := a[key]
		return ok, err
	}
	framework.Poll(t, "the node asks for update approval", func(ctx context.Context) (bool, error) {
		return has(ctx, deckhousev1.WaitingForApprovalAnnotation)
	})
	if _, ok := annotations(t, n)[checksumAnnotation]; ok {
		t.Error("a node asking for approval must not count as up to date")
	}
	if err := n.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.ApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the node asks for a disruption", func(ctx context.Context) (bool, error) {
		return has(ctx, deckhousev1.DisruptionRequiredAnnotation)
	})
	if n.Exists("reboots") {
		t.Fatal("the node rebooted before its disruption was approved")
	}
	if err := n.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.DisruptionApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the run: %v\n%s", err, out)
	}
	if got := n.Read("reboots"); got != "reboot\n" {
		t.Fatalf("reboot command calls: %q, want exactly one\n%s", got, out)
	}
	if strings.TrimSpace(n.Read("rebooted-with")) != sum {
		t.Errorf("the reboot must come after the configuration is recorded; at reboot the checksum file held %q", n.Read("rebooted-with"))
	}
	a := annotations(t, n)
	if _, ok := a[deckhousev1.RebootAnnotation]; !ok {
		t.Error("the reboot request was cleared before the node came back")
	}
	if _, ok := a[checksumAnnotation]; ok {
		t.Error("the node reported its configuration before the reboot; node-manager would end its disruption while it is down")
	}

	// Back from the reboot: the run converges, reports, and clears the request.
	mustRun(t, n)
	a = annotations(t, n)
	if _, ok := a[deckhousev1.RebootAnnotation]; ok {
		t.Error("the answered reboot request should be cleared once the node is back")
	}
	if a[checksumAnnotation] != sum {
		t.Errorf("after the reboot the node reports %q, want %q", a[checksumAnnotation], sum)
	}
	mustRun(t, n)
	if got := n.Read("reboots"); got != "reboot\n" {
		t.Errorf("reboot command calls after the node came back: %q, want still one", got)
	}
}

// A NodeGroupConfiguration of weight 0 sorts before every built-in step; it
// must still run only once the update is approved.
func TestAWeightZeroStepWaitsForUpdateApproval(t *testing.T) {
	t.Parallel()
	group := ownGroup(t, "early", deckhousev1.ApprovalManual)
	n := newNode(t, "early-1", group)
	mustRun(t, n)
	changeBundleWeight(t, "0-early.sh", group, 0, `touch "$BASHIBLE_ROOT/early-marker"`+"\n")
	cmd, out, err := n.Start(framework.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	framework.Poll(t, "the node asks for update approval", func(ctx context.Context) (bool, error) {
		a, err := n.Annotations(ctx, f.CP)
		_, ok := a[deckhousev1.WaitingForApprovalAnnotation]
		return ok, err
	})
	time.Sleep(2 * time.Second) // a few polls of a node that waits
	if n.Exists("early-marker") {
		t.Fatal("the weight-0 step ran before the update was approved")
	}
	empty := ""
	if err := n.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.ApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the run: %v\n%s", err, out)
	}
	if !n.Exists("early-marker") {
		t.Error("the weight-0 step should run once the update is approved")
	}
}

func TestDisruptionGateAndRollingUpdate(t *testing.T) {
	t.Parallel()
	manual := ownGroup(t, "disrupt", deckhousev1.ApprovalManual)
	n := newNode(t, "disrupt-1", manual)
	mustRun(t, n)
	if err := n.Control("disrupt", true); err != nil {
		t.Fatal(err)
	}
	changeBundle(t, "disruption-probe.sh", manual, "echo disrupt\n")
	empty := ""
	if err := n.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.ApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	cmd, out, err := n.Start(framework.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	framework.Poll(t, "the node asks for disruption approval", func(ctx context.Context) (bool, error) {
		a, err := n.Annotations(ctx, f.CP)
		_, ok := a[deckhousev1.DisruptionRequiredAnnotation]
		return ok, err
	})
	if n.Exists("disrupted") {
		t.Fatal("the disruptive action ran before it was approved")
	}
	if err := n.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.DisruptionApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !n.Exists("disrupted") {
		t.Error("the disruptive action should run once approved")
	}

	// RollingUpdate: the node asks to be replaced and stops.
	rolling := ownGroup(t, "rolling", deckhousev1.ApprovalRollingUpdate)
	r := newNode(t, "rolling-1", rolling)
	mustRun(t, r)
	if err := r.Control("disrupt", true); err != nil {
		t.Fatal(err)
	}
	next := changeBundle(t, "rolling-probe.sh", rolling, "echo rolling\n")
	if err := r.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.ApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	run := mustRun(t, r)
	if _, ok := annotations(t, r)[deckhousev1.RollingUpdateAnnotation]; !ok {
		t.Fatalf("the node should annotate rolling-update:\n%s", run.Output)
	}
	if r.Exists("disrupted") || strings.Contains(r.Read("var/lib/bashible/configuration_checksum"), next) {
		t.Error("in RollingUpdate mode the node must stop, not disrupt or record the new checksum")
	}
}

func TestNodeIsRefusedAnotherGroupWithAClearError(t *testing.T) {
	t.Parallel()
	n := newNode(t, "scope-1", "sim")
	cmd := exec.CommandContext(framework.Context(t), "bash", "-c",
		`source "$1"; bb-kube-api GET /apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/other`, "probe", n.Path("var/lib/bashible/lib.sh"))
	mustRun(t, n) // writes lib.sh
	cmd.Env = append(os.Environ(), "BASHIBLE_ROOT="+n.Root, "BASHIBLE_API_ENDPOINTS="+n.Endpoint, "BASHIBLE_NODE_NAME="+n.Name)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("reading another group's bundle succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "HTTP 403") || !strings.Contains(string(out), `may read only node group "sim", not "other"`) {
		t.Errorf("the refusal should be clear:\n%s", out)
	}
}
