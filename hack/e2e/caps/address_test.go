package caps

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/caps/hostssh"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// The StaticInstance condition and reason of a refused address.
const (
	condAddress  = "AddressAvailable"
	addressInUse = "AddressInUse"
)

// cleanedMarker is what the stand-in cleanup_static_node.sh leaves behind.
const cleanedMarker = "var/tmp/cleaned"

// runningNode makes h a host that already is a node: its sshd runs, its
// bashible directory holds the stand-in cleanup script and, when
// providerID is not "", the identity files a bootstrap wrote; its Node is
// registered with h's address as InternalIP, the providerID (none when
// ""), configured by bashible, a control-plane node when controlPlane.
// It returns the Node and a check that the host and the Node are as they
// were: the identity files untouched, the cleanup never run, the Node's
// providerID unchanged.
func runningNode(t *testing.T, h host, group, providerID string, controlPlane bool) (*corev1.Node, func(context.Context) error) {
	t.Helper()
	if err := os.MkdirAll(h.file(hostssh.BashibleDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if providerID != "" {
		for path, value := range map[string]string{hostssh.ProviderIDFile: providerID, hostssh.MachineNameFile: h.Name} {
			if err := os.WriteFile(h.file(path), []byte(value+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	installCleanup(t, h)
	identity := func() string {
		var b strings.Builder
		for _, path := range []string{hostssh.ProviderIDFile, hostssh.MachineNameFile} {
			data, err := os.ReadFile(h.file(path))
			fmt.Fprintf(&b, "%s=%q(%v) ", filepath.Base(path), data, os.IsNotExist(err))
		}
		return b.String()
	}
	before := identity()
	node := framework.NewNode(h.Name, group)
	if controlPlane {
		node.Labels[deckhousev1.ControlPlaneRoleLabel] = ""
	}
	node.Spec.ProviderID = providerID
	node.Annotations = map[string]string{deckhousev1.ConfigurationChecksumAnnotation: "e2e"}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.Address}, {Type: corev1.NodeHostName, Address: h.Name}}
	node = registerNode(t, node)
	untouched := func(ctx context.Context) error {
		if now := identity(); now != before {
			return fmt.Errorf("%s: CAPS rewrote the identity of a running node: %s, was %s", h.Name, now, before)
		}
		if h.has(cleanedMarker) {
			return fmt.Errorf("%s: CAPS ran cleanup_static_node.sh on a running node", h.Name)
		}
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("Node %s: %w", h.Name, err)
		}
		if n.Spec.ProviderID != providerID {
			return fmt.Errorf("Node %s: CAPS changed its providerID from %q to %q", h.Name, providerID, n.Spec.ProviderID)
		}
		return nil
	}
	return node, untouched
}

// waitAddressInUse waits until the instance name is refused: phase
// Error, AddressAvailable False with reason AddressInUse and a message
// that names holder, and the AddressInUse Event saying so; check must hold
// all along. It returns the condition's message.
func waitAddressInUse(t *testing.T, name, holder string, check func(context.Context) error) string {
	t.Helper()
	var message string
	framework.Poll(t, "StaticInstance "+name+" refused: its address is "+holder+"'s", func(ctx context.Context) (bool, error) {
		if check != nil {
			if err := check(ctx); err != nil {
				return false, err
			}
		}
		inst, err := instance(ctx, name)
		if err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(inst.Status.Conditions, condAddress)
		if phase(inst) != deckhousev1alpha2.StaticInstanceError || inst.Status.MachineRef != nil ||
			cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != addressInUse {
			return false, nil
		}
		message = cond.Message
		return strings.Contains(message, holder), nil
	})
	f.WaitEventNote(t, name, addressInUse, holder)
	return message
}

// waitAddressFree waits until the refused instance name is Pending again,
// its AddressAvailable condition True.
func waitAddressFree(t *testing.T, name string) {
	t.Helper()
	framework.Poll(t, "StaticInstance "+name+" Pending again, its address free", func(ctx context.Context) (bool, error) {
		inst, err := instance(ctx, name)
		if err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(inst.Status.Conditions, condAddress)
		return phase(inst) == deckhousev1alpha2.StaticInstancePending && inst.Status.MachineRef == nil &&
			cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
}

// TestStaticInstanceAtAMastersAddressIsRefused (issue 35, item 2, case a):
// a StaticInstance whose address is a running control-plane node that
// registered with a providerID. Before, CAPS picked it, overwrote the
// host's node-spec-provider-id in its bootstrap, and when no Node with the
// new providerID came (the Node already has one), the bootstrap timeout
// ran cleanup_static_node.sh on the master. Now the instance is refused
// before it is bound (Error, AddressInUse, naming the Node) and the
// machine takes the free host; that host's bootstrap timing out and being
// cleaned, and then the machine's deletion, are the points where the
// master would have been cleaned: no session ever reached the master.
func TestStaticInstanceAtAMastersAddressIsRefused(t *testing.T) {
	const name = "caps-master-address"
	showCAPSLog(t)
	// A short bootstrap timeout: the point where the master was cleaned.
	restartCAPS(t, "caps-master-address", false, "--bootstrap-timeout=8s", "--cleanup-timeout=60s")
	t.Cleanup(func() { restartCAPS(t, "caps-after-master-address", false, capsArgs...) })
	logins := framework.NewSSHLogins(t)
	hosts := startHosts(t, logins, "master", 2)
	master, free := hosts[0], hosts[1]
	testCredentials(t, "caps-master-address", deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: int32(master.Port)})
	node, untouched := runningNode(t, master, deckhousev1.MasterNodeGroup, infrav1alpha1.ProviderIDPrefix+"3d0c2a5e-0000-4000-8000-00000000a001", true)
	role := map[string]string{"role": name}
	// Both Pending since the same second: CAPS used to pick the master's
	// first (by name).
	testInstance(t, master, "caps-master-address", role, nil)
	testInstance(t, free, "caps-master-address", role, nil)
	scale := scriptedMachines(t, name, 1)

	message := waitAddressInUse(t, master.instance, "Node "+node.Name, untouched)
	t.Logf("AddressInUse: %s", message)
	for _, want := range []string{master.Address, node.Spec.ProviderID, "delete the Node"} {
		if !strings.Contains(message, want) {
			t.Errorf("the AddressInUse message should name %q: %s", want, message)
		}
	}
	// The machine took the free host; its bootstrap never finishes, times
	// out and is cleaned.
	waitRuns(t, free, 1)
	f.WaitEventNote(t, free.instance, "StaticInstanceBootstrapTimeoutReached", "did not finish within 8s")
	f.WaitEventNote(t, free.instance, "CleanupScriptSucceeded", "Pending again")
	// The machine goes: the host it holds (if any) is cleaned, not the master.
	scale(0)
	waitPhase(t, free.instance, deckhousev1alpha2.StaticInstancePending, false)
	framework.Poll(t, "the scripted machine gone", func(ctx context.Context) (bool, error) {
		for _, m := range listMachines(ctx) {
			if m.Labels[clusterv1.MachineDeploymentNameLabel] == name {
				return false, nil
			}
		}
		return true, nil
	})
	if err := untouched(framework.Context(t)); err != nil {
		t.Error(err)
	}
	if n := master.Logins(); n != 0 {
		t.Errorf("%s: CAPS logged in %d times to a running master", master.Name, n)
	}
	if inst, err := instance(framework.Context(t), master.instance); err != nil || phase(inst) != deckhousev1alpha2.StaticInstanceError {
		t.Errorf("the master's StaticInstance should still be refused: %v %v", err, inst)
	}
}

// TestStaticInstanceAtAManualNodesAddressIsRefused (issue 35, item 2, case
// b): a StaticInstance without skip-bootstrap-phase whose address is a
// node joined by hand (no providerID). Before, CAPS found that Node by its
// address, made the instance Running at once and gave the Node the
// machine's providerID, with no SSH and no guard; a scale-down then
// cleaned the host. Now it is refused (AddressInUse) and the machine takes
// the free host; that host's cleanup on scale-down is the point where the
// node would have been cleaned. Adding skip-bootstrap-phase makes it an
// adoption, which the same address no longer refuses; a Node that goes
// frees the address too.
func TestStaticInstanceAtAManualNodesAddressIsRefused(t *testing.T) {
	const name = "caps-manual-address"
	showCAPSLog(t)
	logins := framework.NewSSHLogins(t)
	hosts := startHosts(t, logins, "manual", 2)
	manual, free := hosts[0], hosts[1]
	testCredentials(t, "caps-manual-address", deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: int32(manual.Port)})
	node, untouched := runningNode(t, manual, "worker", "", false)
	role := map[string]string{"role": name}
	testInstance(t, manual, "caps-manual-address", role, nil)
	testInstance(t, free, "caps-manual-address", role, nil)
	scale := scriptedMachines(t, name, 1)

	message := waitAddressInUse(t, manual.instance, "Node "+node.Name, untouched)
	t.Logf("AddressInUse: %s", message)
	if !strings.Contains(message, deckhousev1.SkipBootstrapPhaseAnnotation) {
		t.Errorf("the AddressInUse message should say how to hand the node over: %s", message)
	}
	// The machine took the free host instead; released, it joins.
	waitRuns(t, free, 1)
	if err := os.WriteFile(free.file("var/tmp/release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	playKubelet(t, free, "", "var/lib/bashible/bootstrapped")
	waitPhase(t, free.instance, deckhousev1alpha2.StaticInstanceRunning, true)
	// Scale-down cleans the machine's host, never the manual node.
	scale(0)
	waitPhase(t, free.instance, deckhousev1alpha2.StaticInstancePending, false)
	if !free.has(cleanedMarker) {
		t.Errorf("%s: the machine's own host was not cleaned on scale-down", free.Name)
	}
	if err := untouched(framework.Context(t)); err != nil {
		t.Error(err)
	}
	if n := manual.Logins(); n != 0 {
		t.Errorf("%s: CAPS logged in %d times to a node it refused", manual.Name, n)
	}

	// Handed over on purpose: the annotation makes it an adoption.
	patchInstance(t, manual.instance, `{"metadata":{"annotations":{"`+deckhousev1.SkipBootstrapPhaseAnnotation+`":""}}}`)
	waitAddressFree(t, manual.instance)
	patchInstance(t, manual.instance, `{"metadata":{"annotations":{"`+deckhousev1.SkipBootstrapPhaseAnnotation+`":null}}}`)
	waitAddressInUse(t, manual.instance, "Node "+node.Name, untouched)
	// The Node goes (the host was reinstalled): the address is free.
	if err := f.Kube.CoreV1().Nodes().Delete(framework.Context(t), node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAddressFree(t, manual.instance)
}

// TestStaticInstanceDuplicateAddressIsRefused (issue 35, item 2): two
// StaticInstances of one host. Before, each went to a machine of its own
// and both bootstrapped the host at once. Now the second is refused,
// naming the first, and the first one's machine bootstraps the host alone;
// once the first is gone, the second is free again.
func TestStaticInstanceDuplicateAddressIsRefused(t *testing.T) {
	const name = "caps-duplicate"
	showCAPSLog(t)
	logins := framework.NewSSHLogins(t)
	h := startHosts(t, logins, "dup", 1)[0]
	testCredentials(t, "caps-duplicate", deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: int32(h.Port)})
	role := map[string]string{"role": name}
	first, second := host{SSHHost: h.SSHHost, instance: "dup-a"}, host{SSHHost: h.SSHHost, instance: "dup-b"}
	testInstance(t, first, "caps-duplicate", role, nil)
	testInstance(t, second, "caps-duplicate", role, nil)
	scale := scriptedMachines(t, name, 2)

	message := waitAddressInUse(t, second.instance, "StaticInstance "+first.instance, func(context.Context) error {
		if n := runs(h); n > 1 {
			return fmt.Errorf("%s: the bootstrap started %d times: two machines bootstrap one host", h.Name, n)
		}
		return nil
	})
	t.Logf("AddressInUse: %s", message)
	waitRuns(t, h, 1)
	if err := os.WriteFile(h.file("var/tmp/release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	playKubelet(t, first, "", "var/lib/bashible/bootstrapped")
	waitPhase(t, first.instance, deckhousev1alpha2.StaticInstanceRunning, true)
	if n := runs(h); n != 1 {
		t.Errorf("%s: the bootstrap started %d times, want once", h.Name, n)
	}
	if inst, err := instance(framework.Context(t), second.instance); err != nil || inst.Status.MachineRef != nil || phase(inst) != deckhousev1alpha2.StaticInstanceError {
		t.Errorf("the duplicate should stay refused while the first holds the host: %v %v", err, inst)
	}
	scale(0)
	waitPhase(t, first.instance, deckhousev1alpha2.StaticInstancePending, false)
	if err := f.NM.DeckhouseV1alpha2().StaticInstances().Delete(framework.Context(t), first.instance, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its Node too (Cluster API deletes it itself, but may not have yet).
	if err := f.Kube.CoreV1().Nodes().Delete(framework.Context(t), h.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitAddressFree(t, second.instance)
}
