package caps

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/caps/hostssh"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
	"github.com/node-manager/node-manager/templates"
)

const ns = deckhousev1.Namespace

// host is a simulated host with its StaticInstance.
type host struct {
	*framework.SSHHost
	instance string
}

// file is a path inside the host's root.
func (h host) file(path string) string { return filepath.Join(h.Root, path) }

func (h host) has(path string) bool {
	_, err := os.Stat(h.file(path))
	return err == nil
}

// Files of a host that bashible and the played kubelet use.
const (
	checksumFile   = "var/lib/bashible/configuration_checksum"
	kubeletCert    = "var/lib/kubelet/pki/kubelet-client-current.pem"
	kubeletBootCfg = "etc/kubernetes/bootstrap-kubelet.conf"
)

// startHosts starts n simulated hosts on 127.0.0.2 and up, all on one
// port, so that one SSHCredentials serves them. Each root has the rootfs
// suite's stubs (systemctl keeps units' state in files; nothing touches
// the test machine's kernel) and the kubelet's bootstrap kubeconfig, which
// the kubelet step writes on a real host (that step is empty in the
// overlay this suite serves): with it, bashible's first run waits for the
// kubelet to join before it records the configuration on the Node, as on
// a real host, so the played kubelet (joinHost) can join at any time.
func startHosts(t *testing.T, logins *framework.SSHLogins, prefix string, n int) []host {
	t.Helper()
	debianroot.RequireRoot(t)
	port := framework.SSHPort(t, n)
	hosts := make([]host, n)
	for i := range hosts {
		root := debianroot.Fresh(t, templates.BuiltinVersions().BasePackages["debian"])
		debianroot.InstallStubs(t, root)
		debianroot.WriteFile(t, filepath.Join(root, kubeletBootCfg),
			"# Stands in for the bootstrap kubeconfig of the kubelet step; the test plays the kubelet.\napiVersion: v1\nkind: Config\n", 0o600)
		name := fmt.Sprintf("%s-%d", prefix, i+1)
		hosts[i] = host{SSHHost: framework.StartSSHHost(t, name, root, fmt.Sprintf("127.0.0.%d", 2+i), port, logins), instance: name}
	}
	return hosts
}

// showCAPSLog prints caps-controller-manager's log when the test fails.
func showCAPSLog(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("caps-controller-manager's log:\n%s", capsManager.Tail(150))
		}
	})
}

// testCredentials creates an SSHCredentials for the test.
func testCredentials(t *testing.T, name string, spec deckhousev1alpha2.SSHCredentialsSpec) {
	t.Helper()
	creds := f.NM.DeckhouseV1alpha2().SSHCredentialses()
	if _, err := creds.Create(framework.Context(t), &deckhousev1alpha2.SSHCredentials{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create SSHCredentials %s: %v", name, err)
	}
	t.Cleanup(func() { _ = creds.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// testInstance creates the StaticInstance of h for the test, with the
// annotations given; nil annotations pin the host's key, as an admin would
// (CAPS contacts no host whose key is neither pinned nor left to trust on
// first use). Its deletion at the end waits until the instance is gone:
// the policies allow deleting a Pending or Error instance only, so the
// test's group goes first (its cleanup runs before this one) and CAPS
// cleans the host, with the test's SSHCredentials still there (theirs runs
// after this one); an instance left behind would hold its address against
// the next test's host there.
func testInstance(t *testing.T, h host, credentials string, labels, annotations map[string]string) {
	t.Helper()
	if annotations == nil {
		annotations = map[string]string{deckhousev1.SSHHostKeyAnnotation: h.HostKey}
	}
	instances := f.NM.DeckhouseV1alpha2().StaticInstances()
	inst := &deckhousev1alpha2.StaticInstance{
		ObjectMeta: metav1.ObjectMeta{Name: h.instance, Labels: labels, Annotations: annotations},
		Spec: deckhousev1alpha2.StaticInstanceSpec{Address: h.Address,
			CredentialsRef: &corev1.ObjectReference{Kind: "SSHCredentials", APIVersion: deckhousev1alpha2.SchemeGroupVersion.String(), Name: credentials}},
	}
	if _, err := instances.Create(framework.Context(t), inst, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StaticInstance %s: %v", h.instance, err)
	}
	t.Cleanup(func() {
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := instances.Delete(ctx, h.instance, metav1.DeleteOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			var at deckhousev1alpha2.StaticInstancePhase
			if inst, err := instance(context.Background(), h.instance); err == nil {
				at = phase(inst)
			}
			t.Errorf("StaticInstance %s not deleted at the end of the test (phase %q): %v", h.instance, at, err)
		}
	})
}

func instance(ctx context.Context, name string) (*deckhousev1alpha2.StaticInstance, error) {
	return f.NM.DeckhouseV1alpha2().StaticInstances().Get(ctx, name, metav1.GetOptions{})
}

func phase(inst *deckhousev1alpha2.StaticInstance) deckhousev1alpha2.StaticInstancePhase {
	if inst.Status.CurrentStatus == nil {
		return ""
	}
	return inst.Status.CurrentStatus.Phase
}

// waitPhase waits until the instance is in phase p, bound to a machine or
// not as bound says.
func waitPhase(t *testing.T, name string, p deckhousev1alpha2.StaticInstancePhase, bound bool) *deckhousev1alpha2.StaticInstance {
	t.Helper()
	var inst *deckhousev1alpha2.StaticInstance
	framework.Poll(t, fmt.Sprintf("StaticInstance %s %s (bound: %t)", name, p, bound), func(ctx context.Context) (bool, error) {
		var err error
		if inst, err = instance(ctx, name); err != nil {
			return false, nil
		}
		return phase(inst) == p && (inst.Status.MachineRef != nil) == bound, nil
	})
	return inst
}

// playKubelet stands in for a scripted bootstrap's kubelet: it waits until
// the host holds ready (a file its bootstrap writes), then registers its
// Node with the providerID read from the host (node-spec-provider-id,
// which CAPS wrote) and a configuration checksum (no bashible runs there
// to set it), and installs the stand-in cleanup script.
func playKubelet(t *testing.T, h host, group, ready string) *corev1.Node {
	t.Helper()
	framework.Poll(t, h.Name+": its bootstrap reached "+ready, func(context.Context) (bool, error) {
		return h.has(ready) && h.has(hostssh.ProviderIDFile), nil
	})
	installCleanup(t, h)
	node := hostNode(t, h, group)
	node.Annotations = map[string]string{deckhousev1.ConfigurationChecksumAnnotation: "e2e"}
	return registerNode(t, node)
}

// joinHost plays the kubelet of a host that runs the group's real
// bootstrap, through the join bashible waits for: once the bootstrap has
// fetched the bundle from the local control plane and bashible has applied
// it (the configuration checksum is on the host, and bashible waits for
// the join), the Instance is created as node-manager-controller creates it
// when it approves a kubelet's certificate, the Node registers with the
// providerID read from the host, and the kubelet's client certificate
// appears on the host. bashible itself then records the configuration on
// the Node (the checksum annotation CAPS waits for), with that certificate.
// It also installs the stand-in cleanup script (the overlay's cleanup step
// is empty).
func joinHost(t *testing.T, h host, group string) *corev1.Node {
	t.Helper()
	framework.Poll(t, h.Name+": the bundle applied by its bootstrap", func(context.Context) (bool, error) {
		return h.has(checksumFile) && h.has(hostssh.ProviderIDFile), nil
	})
	installCleanup(t, h)
	instances := f.NM.DeckhouseV1alpha1().Instances()
	if _, err := instances.Create(framework.Context(t), framework.NewInstance(h.Name, group), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create Instance %s: %v", h.Name, err)
	}
	t.Cleanup(func() { _ = instances.Delete(context.Background(), h.Name, metav1.DeleteOptions{}) })
	node := registerNode(t, hostNode(t, h, group))
	creds, err := f.CP.NodeCredentials(h.Name)
	if err != nil {
		t.Fatal(err)
	}
	debianroot.WriteFile(t, h.file(kubeletCert), string(creds.CertPEM)+string(creds.KeyPEM), 0o600)
	return node
}

// hostNode is the Node h's kubelet registers: the providerID read from
// the host, its address and name.
func hostNode(t *testing.T, h host, group string) *corev1.Node {
	t.Helper()
	providerID := strings.TrimSpace(framework.ReadFile(t, h.file(hostssh.ProviderIDFile)))
	if !strings.HasPrefix(providerID, infrav1alpha1.ProviderIDPrefix) {
		t.Fatalf("%s: node-spec-provider-id is %q", h.Name, providerID)
	}
	node := framework.NewNode(h.Name, group)
	node.Spec.ProviderID = providerID
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.Address}, {Type: corev1.NodeHostName, Address: h.Name}}
	return node
}

// installCleanup installs the stand-in cleanup_static_node.sh the bundle
// would have installed: it removes /var/lib/bashible and the kubelet's
// files and leaves /var/tmp/cleaned behind.
func installCleanup(t *testing.T, h host) {
	t.Helper()
	cleanup := "#!/usr/bin/env bash\n[[ \"${1:-}\" == " + hostssh.Quote(hostssh.CleanupFlag) + " ]] || exit 1\n" +
		"rm -rf /var/lib/bashible /var/lib/kubelet\ntouch /var/tmp/cleaned\n"
	if err := os.WriteFile(h.file(hostssh.CleanupScriptFile), []byte(cleanup), 0o700); err != nil {
		t.Fatal(err)
	}
}

// registerNode creates node; Cluster API deletes it itself when its
// Machine goes, so the test's own deletion may find it gone.
func registerNode(t *testing.T, node *corev1.Node) *corev1.Node {
	t.Helper()
	nodes := f.Kube.CoreV1().Nodes()
	created, err := nodes.Create(framework.Context(t), node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("register Node %s: %v", node.Name, err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	return created
}

func patchGroup(t *testing.T, group, patch string) {
	t.Helper()
	if _, err := f.NM.DeckhouseV1().NodeGroups().Patch(framework.Context(t), group, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch NodeGroup %s with %s: %v", group, patch, err)
	}
}

func patchInstance(t *testing.T, name, patch string) {
	t.Helper()
	if _, err := f.NM.DeckhouseV1alpha2().StaticInstances().Patch(framework.Context(t), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch StaticInstance %s with %s: %v", name, patch, err)
	}
}

// statusWrites is caps_status_writes_total summed over kinds.
func statusWrites(t *testing.T) int {
	t.Helper()
	code, body, err := capsManager.Get(framework.Context(t), "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET caps-controller-manager /metrics: %d %v", code, err)
	}
	total := 0
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "caps_status_writes_total{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("caps_status_writes_total line %q", line)
			}
			total += int(n)
		}
	}
	return total
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// quietPeriod is how long the hot-loop check watches a cluster where
// nothing changes.
const quietPeriod = time.Minute

func listMachines(ctx context.Context) []clusterv1.Machine {
	l, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machines")).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := make([]clusterv1.Machine, 0, len(l.Items))
	for _, u := range l.Items {
		var m clusterv1.Machine
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// machineOf is the Machine owning sm.
func machineOf(sm *infrav1alpha1.StaticMachine) string {
	for _, o := range sm.OwnerReferences {
		if o.Kind == "Machine" {
			return o.Name
		}
	}
	return ""
}

// checkBundleApplied checks that bashible ran on h the bundle of
// configuration served: its files are on the host, the configuration is
// recorded there and on the Node (by bashible, with the kubelet's
// certificate), and the steps' effects are there: the bashible units
// written and the timer enabled and started through systemctl (the stub
// keeps the state), and the overlay's harmless step's record.
func checkBundleApplied(t *testing.T, h host, group, served string) {
	t.Helper()
	for _, path := range []string{"var/lib/bashible/bashible.sh", "var/lib/bashible/lib.sh", "var/lib/bashible/bundle_steps/005_bashible_units.sh",
		"var/lib/bashible/bundle_steps/020_harmless.sh", "etc/systemd/system/bashible.timer", "etc/systemd/system/bashible.service",
		"var/lib/stub-systemd/enabled/bashible.timer", "var/lib/stub-systemd/active/bashible.timer"} {
		if !h.has(path) {
			t.Errorf("%s: /%s is missing after the bootstrap", h.Name, path)
		}
	}
	if h.has("var/lib/bashible/first_run") {
		t.Errorf("%s: /var/lib/bashible/first_run is still there: bashible's first run did not finish", h.Name)
	}
	if got := strings.TrimSpace(framework.ReadFile(t, h.file(checksumFile))); got != served {
		t.Errorf("%s: configuration_checksum %q, want the served %q", h.Name, got, served)
	}
	if got := strings.TrimSpace(framework.ReadFile(t, h.file("applied-group"))); got != group {
		t.Errorf("%s: the harmless step recorded group %q, want %q", h.Name, got, group)
	}
	node, err := f.Kube.CoreV1().Nodes().Get(framework.Context(t), h.Name, metav1.GetOptions{})
	if err != nil || node.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != served {
		t.Errorf("Node %s should carry the served checksum %q, set by bashible: %v %v", h.Name, served, err, node)
	}
}

// TestStaticInstancesJoinAndLeave is the life of static hosts through
// Cluster API and CAPS, against real sshds: a Static group with
// staticInstances.count 2 and three matching hosts, one of them labelled
// allow-bootstrap=false. CAPS picks the two others, logs in (root with a
// key, a sudo user with a key), writes the provider id and machine name
// and runs the group's real manual-bootstrap script from
// manual-bootstrap-for-<group>: it fetches the group's bootstrap from the
// local control plane, which fetches bashible, which applies the bundle
// bashible-apiserver serves (systemctl stubbed) and waits for the join;
// the test plays the kubelet (joinHost), and bashible records the
// configuration on the Node. Both go Running, their StaticMachines
// provisioned, their Machines Running with the Nodes; a quiet minute then
// makes no status write. count 1: Cluster API drains one Machine, CAPS
// runs cleanup_static_node.sh on its host and the instance is Pending
// again. The host released is then handed over as an existing node
// (skip-bootstrap-phase): count 2 adopts it, writing only the two files.
// Deleting the Instance of the other node replaces its machine with a
// fourth host: node-manager-controller deletes the Machine, the host is
// drained, cleaned and released, and the MachineSet's new Machine
// bootstraps the spare. An instance whose labels stop matching the group's
// selector is released the same way. The host never allowed is never
// picked.
func TestStaticInstancesJoinAndLeave(t *testing.T) {
	const group = "caps-static"
	showCAPSLog(t)
	logins := framework.NewSSHLogins(t)
	// hosts[3] is the spare, given its StaticInstance later.
	hosts := startHosts(t, logins, "caps", 4)
	port := int32(hosts[0].Port)
	testCredentials(t, "caps-root", deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: port})
	testCredentials(t, "caps-sudo", deckhousev1alpha2.SSHCredentialsSpec{User: logins.SudoUser, PrivateSSHKey: b64(logins.SudoKey), SSHPort: port})
	role := map[string]string{"role": group}
	// The first two hosts' keys are left to trust on first use (an admin's
	// choice): CAPS pins what it sees.
	tofu := map[string]string{deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation: "true"}
	testInstance(t, hosts[0], "caps-root", role, tofu)
	testInstance(t, hosts[1], "caps-sudo", role, tofu)
	testInstance(t, hosts[2], "caps-root", map[string]string{"role": group, deckhousev1.AllowBootstrapLabel: "false"}, nil)
	f.TestGroup(t, framework.NewGroup(group, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.StaticInstances = &deckhousev1.StaticInstancesSpec{Count: 2, LabelSelector: &metav1.LabelSelector{MatchLabels: role}}
	}))

	// The real bootstrap ran as root on both and applied the bundle.
	nodes := map[string]*corev1.Node{}
	for _, h := range hosts[:2] {
		nodes[h.instance] = joinHost(t, h, group)
	}
	served := f.Checksum(t, group)
	for _, h := range hosts[:2] {
		inst := waitPhase(t, h.instance, deckhousev1alpha2.StaticInstanceRunning, true)
		if inst.Status.NodeRef == nil || inst.Status.NodeRef.Name != h.Name {
			t.Errorf("%s: nodeRef %v, want Node %s", h.instance, inst.Status.NodeRef, h.Name)
		}
		checkBundleApplied(t, h, group, served)
		// Pinned once the bootstrap's session has ended (bashible ends it
		// once it has recorded the configuration on the Node).
		framework.Poll(t, h.instance+": the host key pinned on first use", func(ctx context.Context) (bool, error) {
			inst, err := instance(ctx, h.instance)
			if err != nil {
				return false, nil
			}
			if got := inst.Annotations[deckhousev1.SSHHostKeyAnnotation]; got != "" && got != h.HostKey {
				return false, fmt.Errorf("pinned %q, the host's key is %q", got, h.HostKey)
			}
			return inst.Annotations[deckhousev1.SSHHostKeyAnnotation] == h.HostKey, nil
		})
		sm, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).Get(framework.Context(t), inst.Status.MachineRef.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !sm.Status.Ready || sm.Spec.ProviderID != nodes[h.instance].Spec.ProviderID || len(sm.Status.Addresses) == 0 || sm.Status.Addresses[0].Address != h.Address {
			t.Errorf("StaticMachine %s: ready %t, providerID %q, addresses %v; want ready with the Node's providerID and addresses", sm.Name, sm.Status.Ready, sm.Spec.ProviderID, sm.Status.Addresses)
		}
		if got := strings.TrimSpace(framework.ReadFile(t, h.file(hostssh.MachineNameFile))); got != machineOf(sm) {
			t.Errorf("%s: machine-name %q, want the Machine %q", h.Name, got, machineOf(sm))
		}
	}
	framework.Poll(t, "both Machines Running with their Nodes", func(ctx context.Context) (bool, error) {
		running := 0
		for _, m := range listMachines(ctx) {
			if m.Status.Phase == "Running" && m.Status.NodeRef.Name != "" {
				running++
			}
		}
		return running == 2, nil
	})
	// Deckhouse's status.engine and Scaling condition: Cluster API makes the
	// group's machines, and it has as many Instances as it wants.
	framework.Poll(t, "NodeGroup "+group+": status.engine CAPI, Scaling False (DesiredReached)", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ng.Status.Conditions, "Scaling")
		return ng.Status.Engine == deckhousev1.NodeGroupEngineCAPI && c != nil && c.Status == metav1.ConditionFalse && c.Reason == "DesiredReached", nil
	})
	if inst, err := instance(framework.Context(t), hosts[2].instance); err != nil || inst.Status.MachineRef != nil || hosts[2].has(hostssh.ProviderIDFile) {
		t.Errorf("the host labelled allow-bootstrap=false was picked: %v, %v", inst, err)
	}

	// A quiet minute: nothing changes, nothing is written.
	before := statusWrites(t)
	quiet := framework.Context(t)
	select {
	case <-quiet.Done():
	case <-time.After(quietPeriod):
	}
	if after := statusWrites(t); after != before {
		t.Errorf("caps-controller-manager wrote %d statuses in a quiet %s (a hot loop)", after-before, quietPeriod)
	} else {
		t.Logf("status writes in a quiet %s: %d (total so far %d)", quietPeriod, after-before, after)
	}

	// count 1: one host is drained, cleaned and released.
	patchGroup(t, group, `{"spec":{"staticInstances":{"count":1}}}`)
	var released host
	framework.Poll(t, "one instance cleaned and Pending again", func(ctx context.Context) (bool, error) {
		for _, h := range hosts[:2] {
			inst, err := instance(ctx, h.instance)
			if err == nil && phase(inst) == deckhousev1alpha2.StaticInstancePending && inst.Status.MachineRef == nil {
				released = h
				return true, nil
			}
		}
		return false, nil
	})
	if released.has("var/lib/bashible") || !released.has("var/tmp/cleaned") {
		t.Errorf("%s: cleanup_static_node.sh did not run: /var/lib/bashible exists %t, /var/tmp/cleaned exists %t",
			released.Name, released.has("var/lib/bashible"), released.has("var/tmp/cleaned"))
	}
	f.WaitEventNote(t, released.instance, "CleanupScriptSucceeded", "Pending again")
	framework.Poll(t, "Node "+released.Name+" deleted by Cluster API after the cleanup", func(ctx context.Context) (bool, error) {
		_, err := f.Kube.CoreV1().Nodes().Get(ctx, released.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// Cluster API deletes a deleted Machine's Node by name until the
	// Machine itself is gone (a reconcile from a stale cache deletes it
	// again): the host joins again only after that, as a kubelet
	// re-registering seconds later would otherwise lose its new Node.
	framework.Poll(t, "the released host's Machine gone, one Machine left", func(ctx context.Context) (bool, error) {
		machines := listMachines(ctx)
		return len(machines) == 1 && machines[0].DeletionTimestamp == nil, nil
	})

	// Hand the released host over as a running node: the Node exists (no
	// providerID: it joined by hand), and count 2 adopts it.
	adopted := framework.NewNode(released.Name, group)
	adopted.Annotations = map[string]string{deckhousev1.ConfigurationChecksumAnnotation: "e2e"}
	adopted.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: released.Address}}
	registerNode(t, adopted)
	patchInstance(t, released.instance, `{"metadata":{"annotations":{"`+deckhousev1.SkipBootstrapPhaseAnnotation+`":""}}}`)
	patchGroup(t, group, `{"spec":{"staticInstances":{"count":2}}}`)
	inst := waitPhase(t, released.instance, deckhousev1alpha2.StaticInstanceRunning, true)
	framework.Poll(t, "the adoption annotation removed", func(ctx context.Context) (bool, error) {
		inst, err := instance(ctx, released.instance)
		if err != nil {
			return false, nil
		}
		_, still := inst.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation]
		return !still, nil
	})
	entries, err := os.ReadDir(released.file("var/lib/bashible"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "machine-name node-spec-provider-id" {
		t.Errorf("adoption wrote %v to /var/lib/bashible, want only machine-name and node-spec-provider-id", names)
	}
	// CAPS gives the Node the machine's providerID once it has reported
	// the instance Running.
	written := strings.TrimSpace(framework.ReadFile(t, released.file(hostssh.ProviderIDFile)))
	framework.Poll(t, "the adopted Node's providerID the one written to the host", func(ctx context.Context) (bool, error) {
		node, err := f.Kube.CoreV1().Nodes().Get(ctx, released.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the adopted Node %s was deleted while CAPS adopted it", released.Name)
		}
		if err != nil || node.Spec.ProviderID == "" {
			return false, nil
		}
		if node.Spec.ProviderID != written {
			return false, fmt.Errorf("providerID %q, the host has %q", node.Spec.ProviderID, written)
		}
		return true, nil
	})
	if inst.Status.NodeRef == nil || inst.Status.NodeRef.Name != released.Name {
		t.Errorf("adopted instance's nodeRef %v, want %s", inst.Status.NodeRef, released.Name)
	}
	if inst, err := instance(framework.Context(t), hosts[2].instance); err != nil || inst.Status.MachineRef != nil {
		t.Errorf("the host labelled allow-bootstrap=false was picked: %v, %v", inst, err)
	}

	// Deleting the Instance of the other node replaces its machine with the
	// spare, the host Pending the longest (never the one not allowed).
	victim, spare := hosts[0], hosts[3]
	if released.instance == victim.instance {
		victim = hosts[1]
	}
	testInstance(t, spare, "caps-root", role, nil)
	replaceByDeletingInstance(t, victim, spare, group, served)
	if inst, err := instance(framework.Context(t), hosts[2].instance); err != nil || inst.Status.MachineRef != nil {
		t.Errorf("the host labelled allow-bootstrap=false was picked: %v, %v", inst, err)
	}

	// The spare's labels stop matching the group's selector: its machine
	// goes, its host is cleaned and released. The victim's instance goes
	// first, so the MachineSet's new Machine finds no free host.
	if err := f.NM.DeckhouseV1alpha2().StaticInstances().Delete(framework.Context(t), victim.instance, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the Pending StaticInstance %s: %v", victim.instance, err)
	}
	patchInstance(t, spare.instance, `{"metadata":{"labels":{"role":null}}}`)
	f.WaitEventNote(t, spare.instance, "StaticInstanceNodeGroupLeaved", "no longer match")
	waitPhase(t, spare.instance, deckhousev1alpha2.StaticInstancePending, false)
	if spare.has("var/lib/bashible") || !spare.has("var/tmp/cleaned") {
		t.Errorf("%s: not cleaned after its labels stopped matching: /var/lib/bashible exists %t, /var/tmp/cleaned exists %t",
			spare.Name, spare.has("var/lib/bashible"), spare.has("var/tmp/cleaned"))
	}

	// Empty the group before the instances go (a Running instance may not be deleted).
	patchGroup(t, group, `{"spec":{"staticInstances":{"count":0}}}`)
	waitPhase(t, released.instance, deckhousev1alpha2.StaticInstancePending, false)
}

// replaceByDeletingInstance deletes the Instance of victim's node and
// checks what follows: node-manager-controller deletes the Machine its
// machineRef names, Cluster API drains and deletes the node, CAPS cleans
// the host and releases it (Pending), the Instance goes once its Machine
// has, and the MachineSet's new Machine bootstraps spare with the bundle.
func replaceByDeletingInstance(t *testing.T, victim, spare host, group, served string) {
	t.Helper()
	ctx := framework.Context(t)
	si, err := instance(ctx, victim.instance)
	if err != nil || si.Status.MachineRef == nil {
		t.Fatalf("StaticInstance %s should be bound: %v %v", victim.instance, err, si)
	}
	sm, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).Get(ctx, si.Status.MachineRef.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	machine := machineOf(sm)
	instances := f.NM.DeckhouseV1alpha1().Instances()
	framework.Poll(t, "Instance "+victim.Name+" names its Machine "+machine, func(ctx context.Context) (bool, error) {
		inst, err := instances.Get(ctx, victim.Name, metav1.GetOptions{})
		return err == nil && inst.Status.MachineRef != nil && inst.Status.MachineRef.Name == machine, nil
	})
	if err := instances.Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Instance %s: %v", victim.Name, err)
	}
	waitPhase(t, victim.instance, deckhousev1alpha2.StaticInstancePending, false)
	if victim.has("var/lib/bashible") || !victim.has("var/tmp/cleaned") {
		t.Errorf("%s: cleanup_static_node.sh did not run after its Instance was deleted: /var/lib/bashible exists %t, /var/tmp/cleaned exists %t",
			victim.Name, victim.has("var/lib/bashible"), victim.has("var/tmp/cleaned"))
	}
	framework.Poll(t, "Machine "+machine+", Node and Instance "+victim.Name+" gone", func(ctx context.Context) (bool, error) {
		for _, m := range listMachines(ctx) {
			if m.Name == machine {
				return false, nil
			}
		}
		_, errNode := f.Kube.CoreV1().Nodes().Get(ctx, victim.Name, metav1.GetOptions{})
		_, errInst := instances.Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(errNode) && apierrors.IsNotFound(errInst), nil
	})

	joinHost(t, spare, group)
	inst := waitPhase(t, spare.instance, deckhousev1alpha2.StaticInstanceRunning, true)
	checkBundleApplied(t, spare, group, served)
	if sm, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).Get(ctx, inst.Status.MachineRef.Name, metav1.GetOptions{}); err != nil || machineOf(sm) == machine {
		t.Errorf("the spare should back a new Machine, not %s: %v %v", machine, err, sm)
	}
	if si, err := instance(ctx, victim.instance); err != nil || si.Status.MachineRef != nil {
		t.Errorf("the host just released was picked again instead of the spare: %v %v", err, si)
	}
}
