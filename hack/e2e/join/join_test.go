package join

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
	"github.com/node-manager/node-manager/hack/stack"
	"github.com/node-manager/node-manager/templates"
)

const (
	group    = "worker"
	nodeName = "e2e-join-1"
	// podSubnet is the test's CNI range on the node's bridge: test-only,
	// nothing outside the bridge is routed to it.
	podSubnet = "10.244.15.0/24"
	// bridge is the CNI bridge the network module's configuration names.
	bridge = "nmjoin0"
)

// joinTimeout bounds the phases that run the whole bundle or wait for
// bashible.timer (every minute, with systemd's default minute of accuracy).
// CI's loaded runs took 3m20s from bootstrap.sh to the Node's registration
// (packages installed and containerd and the kubelet started while two more
// suites run), so the bound leaves room above that.
const joinTimeout = 6 * time.Minute

// TestAMachineJoinsRunsAPodAndTakesAnUpdate is issue 15's proof: an
// empty Debian machine given manual-bootstrap-for-worker becomes a Ready
// node of the group running a pod, and takes a new kubelet.maxPods through
// the approval protocol with only the kubelet restarted.
func TestAMachineJoinsRunsAPodAndTakesAnUpdate(t *testing.T) {
	debianroot.RequireRoot(t)
	recapOnFailure(t)
	ctx := context.Background()

	// The cluster as an air-gapped one is set up: binaries from a package
	// mirror, images through a registry mirror, both on loopback.
	sandbox := templates.BuiltinVersions().SandboxImage
	ref, tag, ok := strings.Cut(strings.TrimPrefix(sandbox, "registry.k8s.io/"), ":")
	if !ok || ref == sandbox {
		fatalf(t, "the sandbox image %s is not registry.k8s.io/<name>:<tag>", sandbox)
	}
	images := startPauseRegistry(t, ref, tag)
	source := framework.StartPackageSource(t)
	setClusterConfiguration(t, framework.ClusterConfiguration(t, source.URL, source.Versions,
		"registry:\n  mirrors:\n    - host: registry.k8s.io\n      endpoints: ["+images.URL+"]\n"))
	endpoint := forwardAPIServer(t)
	t.Logf("the cluster's API endpoint: %s", endpoint)
	f.TestGroup(t, framework.NewGroup(group, func(ng *deckhousev1.NodeGroup) {
		// This host: cgroup v1, no CAP_SYS_RESOURCE (see docs/development/real-nodes.md).
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{FailCgroupV1: ptr.To(false)}
		ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerdV2, ContainerdV2: &deckhousev1.ContainerdSpec{RestrictOOMScoreAdj: true}}
	}))
	script := manualBootstrapScript(t)

	// The machine: the cached Debian root, booted.
	root := debianroot.Fresh(t, templates.BuiltinVersions().BasePackages["debian"])
	// The API's only address here is loopback, which an EndpointSlice
	// cannot hold: bashible is pointed at it the documented way.
	debianroot.WriteFile(t, filepath.Join(root, "etc/environment"), "BASHIBLE_API_ENDPOINTS="+apiServerHostPort(t)+"\n", 0o644)
	debianroot.WriteFile(t, filepath.Join(root, "root/bootstrap.sh"), script, 0o700)
	m := debianroot.Boot(t, root, nodeName)
	t.Cleanup(func() {
		if t.Failed() {
			// Each unit's own tail: the kubelet alone fills any shared one.
			out, _ := m.Run(context.Background(), "for u in kubelet containerd kubernetes-api-proxy bashible; do echo \"--- $u\"; journalctl --no-pager -n 25 -u $u; done; echo '--- step.log'; tail -n 40 /var/lib/bashible/step.log 2>/dev/null || true")
			t.Logf("the machine's journal:\n%s", out)
		}
	})

	// The join, as a user does it: the script runs on the machine, and
	// from then on nothing is done by hand.
	start := time.Now()
	bootstrap := make(chan error, 1)
	var bootstrapOut string
	go func() {
		bctx, cancel := context.WithTimeout(ctx, joinTimeout)
		defer cancel()
		var err error
		bootstrapOut, err = m.Run(bctx, "bash /root/bootstrap.sh", "BASHIBLE_API_ENDPOINTS="+apiServerHostPort(t))
		bootstrap <- err
	}()

	// The kubelet joins through TLS bootstrap: its CSR is approved by
	// node-manager-controller (which records the Instance first) and signed
	// by kube-controller-manager; the Node registers as the group's.
	var node *corev1.Node
	waitFor(t, "Node "+nodeName+" to register", joinTimeout, func(ctx context.Context) (bool, error) {
		select {
		case err := <-bootstrap:
			bootstrap <- err
			if err != nil {
				return false, fmt.Errorf("bootstrap.sh failed: %v\n%s", err, tail(bootstrapOut, 40))
			}
		default:
		}
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return true, nil
	})
	registered := time.Since(start)
	t.Logf("bootstrap.sh start → Node registered: %s", registered.Round(100*time.Millisecond))
	if node.Labels[deckhousev1.NodeGroupLabel] != group || node.Labels[deckhousev1.NodeTypeLabel] != string(deckhousev1.NodeTypeStatic) {
		errorf(t, "the Node registered with labels %v, want the group's", node.Labels)
	}
	checkCSRApproved(t)
	inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil || inst.Labels[deckhousev1.NodeGroupLabel] != group {
		errorf(t, "Instance %s of group %s: %v %v", nodeName, group, err, inst)
	}

	// The network module's part, which the bundle leaves to it as Deckhouse
	// does: the CNI plugins (Debian's containernetworking-plugins, from the
	// machine's package cache) and a bridge configuration.
	enter("installing the CNI plugins on the machine")
	m.MustRun(installCNI)

	// Ready: the group's checksum recorded, the taint removed by the node
	// template controller, the group counting the node.
	served := f.Checksum(t, group)
	waitFor(t, "Node "+nodeName+" Ready and initialized", joinTimeout, func(ctx context.Context) (bool, error) {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return ready(n) && !tainted(n) && n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == served, nil
	})
	readyAfter := time.Since(start)
	t.Logf("bootstrap.sh start → Node Ready: %s", readyAfter.Round(100*time.Millisecond))
	if err := <-bootstrap; err != nil {
		fatalf(t, "bootstrap.sh: %v\n%s", err, tail(bootstrapOut, 40))
	}
	bootstrap <- nil
	// The first run recorded the configuration itself, once the kubelet had
	// joined (bashible waits for that when it ends first).
	if !strings.Contains(bootstrapOut, "bashible: configuration "+served[:12]+" applied") {
		errorf(t, "the first run should apply %s:\n%s", served[:12], tail(bootstrapOut, 20))
	}
	waitFor(t, "NodeGroup "+group+" status nodes: 1, ready: 1", time.Minute, func(ctx context.Context) (bool, error) {
		g, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		return err == nil && g.Status.Nodes == 1 && g.Status.Ready == 1 && g.Status.UpToDate == 1, nil
	})

	// A pod pinned to the node (there is no scheduler in the local control
	// plane), its image through the registry mirror.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                     nodeName,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "pause", Image: sandbox}},
		},
	}
	if _, err := f.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		fatalf(t, "%v", err)
	}
	t.Cleanup(func() { deletePod(t, pod) })
	waitFor(t, "pod "+pod.Name+" Running", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := f.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("the pod failed: %s: %s (a machine whose disk has less free space than the bundle's eviction thresholds, 5%% at once and 10%% after 90 s, evicts every pod)", p.Status.Reason, p.Status.Message)
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	t.Logf("bootstrap.sh start → pod Running: %s (pod IP %s)", time.Since(start).Round(100*time.Millisecond), pod.Status.PodIP)
	if _, subnet, _ := net.ParseCIDR(podSubnet); !subnet.Contains(net.ParseIP(pod.Status.PodIP)) {
		errorf(t, "the pod has IP %q, want one of the CNI range %s", pod.Status.PodIP, podSubnet)
	}
	if !images.pulled() {
		errorf(t, "the pause image was not pulled through the registry mirror")
	}

	// An update: a new maxPods reaches the running node through
	// bashible.timer and the approval protocol; only the kubelet restarts.
	enter("reading the machine's unit start times before the update")
	before := unitStarts(t, m)
	update := time.Now()
	g, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		fatalf(t, "%v", err)
	}
	g.Spec.Kubelet.MaxPods = ptr.To[int32](150)
	if _, err := f.NM.DeckhouseV1().NodeGroups().Update(ctx, g, metav1.UpdateOptions{}); err != nil {
		fatalf(t, "%v", err)
	}
	newSum := f.WaitChecksum(t, group, func(s string) bool { return s != "" && s != served })
	waitFor(t, "the Node to apply maxPods 150", joinTimeout, func(ctx context.Context) (bool, error) {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return n.Status.Capacity.Pods().Value() == 150 && n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == newSum, nil
	})
	t.Logf("NodeGroup updated → Node capacity pods 150 with the new checksum: %s", time.Since(update).Round(100*time.Millisecond))
	// Through the approval protocol: the node asked and was approved (the
	// first run needed no approval, so it set no WaitingApproval), and
	// reported the new configuration applied on its Instance.
	waitFor(t, "Instance "+nodeName+" to report the approved update applied", time.Minute, func(ctx context.Context) (bool, error) {
		inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		approved, applied := false, false
		for _, c := range inst.Status.Conditions {
			approved = approved || c.Type == "WaitingApproval" && c.Status == metav1.ConditionFalse && c.Reason == "Approved"
			applied = applied || c.Type == "BashibleReady" && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, newSum[:12])
		}
		return approved && applied, nil
	})
	enter("reading the machine's unit start times after the update")
	after := unitStarts(t, m)
	for unit, started := range before {
		if restarted := after[unit] != started; restarted != (unit == "kubelet.service") {
			errorf(t, "%s restarted: %v (before %s, after %s); a new maxPods restarts only the kubelet", unit, restarted, started, after[unit])
		}
	}

	// The joined machine then runs node-manager's own release as pods.
	if t.Failed() {
		return
	}
	host, _, _ := net.SplitHostPort(endpoint)
	t.Run("TheReleaseRunsAsPodsOnTheMachine", func(t *testing.T) { testTheReleaseRunsAsPods(t, m, host) })
}

// installCNI is what a cluster's network module does on a new node: its
// plugins in /opt/cni/bin (here Debian's containernetworking-plugins, from
// the machine's package cache) and a bridge network for pods.
var installCNI = `tmp=$(mktemp -d)
dpkg -x /var/cache/apt/archives/containernetworking-plugins_*.deb "$tmp"
mkdir -p /opt/cni/bin /etc/cni/net.d
cp "$tmp"/usr/lib/cni/* /opt/cni/bin/
rm -rf "$tmp"
cat > /etc/cni/net.d/10-e2e-join.conflist <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "e2e-join",
  "plugins": [
    {"type": "bridge", "bridge": "` + bridge + `", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + podSubnet + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF`

// setClusterConfiguration writes kube-system/d8-cluster-configuration for
// the test and removes it when the test ends.
func setClusterConfiguration(t *testing.T, cc string) {
	t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.ClusterConfigurationSecret, Namespace: metav1.NamespaceSystem},
		Data:       map[string][]byte{deckhousev1.ClusterConfigurationKey: []byte(cc)},
	}
	if _, err := f.Kube.CoreV1().Secrets(metav1.NamespaceSystem).Create(framework.Context(t), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Secrets(metav1.NamespaceSystem).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
}

// forwardAPIServer makes kube-apiserver reachable on this machine's own
// address, port 6443 (it listens on loopback, which an EndpointSlice
// cannot hold), and publishes that as the cluster's API endpoint: the
// node's API proxy (HAProxy on 127.0.0.1:6445) balances over it, and the
// kubelet reaches the API through it. Returns the address.
func forwardAPIServer(t *testing.T) string {
	t.Helper()
	probe, err := net.Dial("udp", "192.0.2.1:9")
	if err != nil {
		t.Fatalf("this machine has no route to find its own address by: %v", err)
	}
	host := probe.LocalAddr().(*net.UDPAddr).IP.String()
	_ = probe.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "6443"))
	if err != nil {
		t.Fatalf("listen on %s:6443 for the node's API proxy: %v", host, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	target := apiServerHostPort(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	if err := stack.PublishAPIEndpoints(framework.Context(t), f.Kube, host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(context.Background(), "kubernetes", metav1.DeleteOptions{})
	})
	return host + ":6443"
}

// apiServerHostPort is kube-apiserver's loopback host:port.
func apiServerHostPort(t *testing.T) string {
	u, err := url.Parse(f.CP.APIServerURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// manualBootstrapScript is the group's manual-bootstrap-for-<group>
// bootstrap.sh, once node-manager-controller has written it.
func manualBootstrapScript(t *testing.T) string {
	t.Helper()
	var script string
	waitFor(t, "Secret "+deckhousev1.ManualBootstrapSecretPrefix+group, time.Minute, func(ctx context.Context) (bool, error) {
		s, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ManualBootstrapSecretPrefix+group, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		script = string(s.Data[deckhousev1.ManualBootstrapScriptKey])
		return script != "", nil
	})
	return script
}

// checkCSRApproved: the node's first certificate was requested with the
// bootstrap token, approved and signed.
func checkCSRApproved(t *testing.T) {
	t.Helper()
	waitFor(t, "the node's kubelet client CSR to be approved and signed", time.Minute, func(ctx context.Context) (bool, error) {
		list, err := f.Kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, csr := range list.Items {
			if !strings.HasPrefix(csr.Spec.Username, "system:bootstrap:") || csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
				continue
			}
			for _, c := range csr.Status.Conditions {
				if c.Type == certificatesv1.CertificateApproved && len(csr.Status.Certificate) > 0 {
					return true, nil
				}
			}
		}
		return false, nil
	})
}

// unitStarts are the start times of the node's services.
func unitStarts(t *testing.T, m *debianroot.Machine) map[string]string {
	t.Helper()
	units := []string{"containerd.service", "kubernetes-api-proxy.service", "kubelet.service"}
	out := m.MustRun("systemctl show -p ExecMainStartTimestampMonotonic --value " + strings.Join(units, " "))
	values := strings.Fields(out)
	if len(values) != len(units) {
		t.Fatalf("systemctl show: %q", out)
	}
	starts := map[string]string{}
	for i, u := range units {
		if values[i] == "0" {
			t.Fatalf("%s is not running", u)
		}
		starts[u] = values[i]
	}
	return starts
}

// deletePod deletes the pod and waits until the kubelet has stopped it,
// so its sandbox's network (CNI DEL) is torn down before the machine halts.
func deletePod(t *testing.T, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := f.Kube.CoreV1().Pods(pod.Namespace)
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete pod %s: %v", pod.Name, err)
		return
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("pod %s was not stopped by the kubelet: %v", pod.Name, err)
	}
}

// waitFor polls cond every 200 ms until it is done, failing the test after
// timeout or on cond's error; for the phases longer than framework.Poll's
// 90 seconds (a whole bundle run, bashible.timer's period).
func waitFor(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	enter("waiting for " + what)
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, cond); err != nil {
		fatalf(t, "waiting for %s: %v", what, err)
	}
}

// progress is where the test stands and its first failure, recapped as
// the last lines of a failed run's output: below the machine's journal and
// its clean-up, which is all a CI excerpt of the output may show.
var progress struct{ phase, failure string }

// enter records the phase the test is in.
func enter(phase string) { progress.phase = phase }

func errorf(t *testing.T, format string, args ...any) {
	t.Helper()
	record(fmt.Sprintf(format, args...))
	t.Errorf(format, args...)
}

func fatalf(t *testing.T, format string, args ...any) {
	t.Helper()
	record(fmt.Sprintf(format, args...))
	t.Fatalf(format, args...)
}

func record(failure string) {
	if progress.failure == "" {
		progress.failure = progress.phase + ": " + tail(failure, 12)
	}
}

// recapOnFailure is registered first, so its clean-up runs last.
func recapOnFailure(t *testing.T) {
	progress.phase, progress.failure = "setting up", ""
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if progress.failure == "" {
			// A helper failed the test on its own (a command on the machine, a framework call).
			progress.failure = progress.phase + ": see the first error above"
		}
		t.Logf("RECAP: the test failed while %s", progress.failure)
	})
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func tainted(n *corev1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == deckhousev1.UninitializedTaint {
			return true
		}
	}
	return false
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
