package caps

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	"github.com/node-manager/node-manager/controllers/clusterapi"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// scriptedBootstrap is the bootstrap script of the scripted machines: it
// counts its runs and blocks until the test creates /var/tmp/release.
const scriptedBootstrap = `#!/usr/bin/env bash
set -Eeuo pipefail
echo run >> /var/tmp/bootstrap-runs
until [[ -e /var/tmp/release ]]; do sleep 0.2; done
touch /var/lib/bashible/bootstrapped
`

// scriptedMachines makes a MachineDeployment name of replicas Machines
// whose bootstrap script is scriptedBootstrap and whose StaticMachines
// select StaticInstances labelled role=name; node-manager-controller's
// Cluster "static" holds it, as it holds the groups'. It returns a function
// that scales it. The bootstrap Secret is the test's own (a group's
// manual-bootstrap-for-<group> is node-manager-controller's, which rewrites
// it), so, as an admin does for a MachineDeployment made by hand, the test
// grants caps-controller-manager get on it by name (grantBootstrapData):
// node-manager-controller's Role grants only the groups' Secrets.
func scriptedMachines(t *testing.T, name string, replicas int32) func(int32) {
	t.Helper()
	grantBootstrapData(t, name)
	return ungrantedScriptedMachines(t, name, replicas)
}

// ungrantedScriptedMachines is scriptedMachines without the grant: CAPS
// may not read the bootstrap Secret.
func ungrantedScriptedMachines(t *testing.T, name string, replicas int32) func(int32) {
	t.Helper()
	ctx := framework.Context(t)
	secrets := f.Kube.CoreV1().Secrets(ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string][]byte{deckhousev1.ManualBootstrapScriptKey: []byte(scriptedBootstrap)}}
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret %s: %v", name, err)
	}
	t.Cleanup(func() { _ = secrets.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	// The objects node-manager-controller writes for a group, without its
	// labels (it deletes those of groups that do not exist) and with the
	// test's Secret.
	ng := framework.NewGroup(name, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.StaticInstances = &deckhousev1.StaticInstancesSpec{Count: replicas,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": name}}}
	})
	tpl := clusterapi.MachineTemplate(ng, ns)
	tpl.Labels = nil
	templates := f.NM.InfrastructureV1alpha1().StaticMachineTemplates(ns)
	if _, err := templates.Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StaticMachineTemplate %s: %v", name, err)
	}
	t.Cleanup(func() { _ = templates.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	md := clusterapi.MachineDeployment(ng, ns)
	md.Labels = nil
	md.Spec.Template.Spec.Bootstrap.DataSecretName = &secret.Name
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(md)
	if err != nil {
		t.Fatal(err)
	}
	mds := dyn.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(ns)
	if _, err := mds.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create MachineDeployment %s: %v", name, err)
	}
	t.Cleanup(func() { _ = mds.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return func(n int32) {
		t.Helper()
		if _, err := mds.Patch(framework.Context(t), name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n), metav1.PatchOptions{}); err != nil {
			t.Fatalf("scale MachineDeployment %s to %d: %v", name, n, err)
		}
	}
}

// restartCAPS replaces caps-controller-manager by a new process with args:
// kill ends it at once, as a crash would (its SSH sessions drop, its
// leader Lease runs out), else it stops gracefully.
func restartCAPS(t *testing.T, identity string, kill bool, args ...string) {
	t.Helper()
	if kill {
		capsManager.Kill()
	} else {
		capsManager.Stop()
	}
	var err error
	if capsManager, err = f.Env.StartCAPS(framework.Context(t), stack.ControllerOptions{Identity: identity, ExtraArgs: args}); err != nil {
		t.Fatalf("restart caps-controller-manager: %v", err)
	}
}

// runs is how often the scripted bootstrap has started on h.
func runs(h host) int {
	b, err := os.ReadFile(h.file("var/tmp/bootstrap-runs"))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "run\n")
}

func waitRuns(t *testing.T, h host, n int) {
	t.Helper()
	framework.Poll(t, fmt.Sprintf("%s: the bootstrap script started %d times", h.Name, n), func(context.Context) (bool, error) {
		return runs(h) >= n, nil
	})
}

// TestBootstrapRefusedResumedTimedOut: a host whose credentials are wrong
// goes Error with a condition that names the problem and not the password;
// a bootstrap interrupted by the host's power loss (its sshd and every
// process of it killed mid-script) and then by a crash of
// caps-controller-manager resumes each time and finishes; a bootstrap that
// does not finish within --bootstrap-timeout is reported by an Event,
// cleaned and released.
func TestBootstrapRefusedResumedTimedOut(t *testing.T) {
	const name = "caps-scripted"
	showCAPSLog(t)
	logins := framework.NewSSHLogins(t)
	h := startHosts(t, logins, "scripted", 1)[0]
	port := int32(h.Port)
	role := map[string]string{"role": name}
	testCredentials(t, "caps-wrong", deckhousev1alpha2.SSHCredentialsSpec{User: logins.PasswordUser, SudoPasswordEncoded: b64([]byte("not-" + logins.Password)), SSHPort: port})
	testCredentials(t, "caps-password", deckhousev1alpha2.SSHCredentialsSpec{User: logins.PasswordUser, SudoPasswordEncoded: b64([]byte(logins.Password)), SSHPort: port})

	// Wrong credentials: Error, and the machine waits for another host.
	wrong := host{SSHHost: h.SSHHost, instance: "scripted-wrong"}
	testInstance(t, wrong, "caps-wrong", role, nil)
	scale := scriptedMachines(t, name, 1)
	inst := waitPhase(t, wrong.instance, deckhousev1alpha2.StaticInstanceError, false)
	cond := meta.FindStatusCondition(inst.Status.Conditions, "CredentialsReady")
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "LoginRefused" || !strings.Contains(cond.Message, "refused the login") {
		t.Errorf("CredentialsReady of an instance with a wrong password: %+v", cond)
	}
	note := f.WaitEventNote(t, wrong.instance, "StaticInstanceCredentialsUnavailable", "refused the login")
	for _, text := range []string{cond.Message, note} {
		if strings.Contains(text, logins.Password) {
			t.Errorf("the password leaked: %q", text)
		}
	}
	if err := f.NM.DeckhouseV1alpha2().StaticInstances().Delete(framework.Context(t), wrong.instance, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("an instance in Error may be deleted: %v", err)
	}

	// The host with the right password: its bootstrap starts, the host
	// loses power mid-script and boots again, the bootstrap starts again.
	good := host{SSHHost: h.SSHHost, instance: "scripted-good"}
	testInstance(t, good, "caps-password", role, nil)
	waitRuns(t, good, 1)
	waitPhase(t, good.instance, deckhousev1alpha2.StaticInstanceBootstrapping, true)
	h.Stop()
	h.Start()
	waitRuns(t, good, 2)
	// caps-controller-manager crashes mid-script; the next one starts it again.
	restartCAPS(t, "caps-2", true, capsArgs...)
	waitRuns(t, good, 3)
	if err := os.WriteFile(good.file("var/tmp/release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	playKubelet(t, good, "", "var/lib/bashible/bootstrapped")
	inst = waitPhase(t, good.instance, deckhousev1alpha2.StaticInstanceRunning, true)
	if c := meta.FindStatusCondition(inst.Status.Conditions, "Bootstrapped"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Bootstrapped after the resumed bootstrap: %+v", c)
	}

	// A bootstrap that never finishes: with a short timeout it is reported,
	// cleaned and released.
	scale(0)
	waitPhase(t, good.instance, deckhousev1alpha2.StaticInstancePending, false)
	if err := os.Remove(good.file("var/tmp/release")); err != nil {
		t.Fatal(err)
	}
	if err := f.Kube.CoreV1().Nodes().Delete(framework.Context(t), good.Name, metav1.DeleteOptions{}); err != nil {
		t.Logf("Node %s: %v (Cluster API deletes it itself)", good.Name, err)
	}
	restartCAPS(t, "caps-3", false, "--bootstrap-timeout=8s", "--cleanup-timeout=60s")
	before := runs(good)
	scale(1)
	waitRuns(t, good, before+1)
	f.WaitEventNote(t, good.instance, "StaticInstanceBootstrapTimeoutReached", "did not finish within 8s")
	f.WaitEventNote(t, good.instance, "CleanupScriptSucceeded", "Pending again")
	scale(0)
	waitPhase(t, good.instance, deckhousev1alpha2.StaticInstancePending, false)
	restartCAPS(t, "caps-4", false, capsArgs...)
}
