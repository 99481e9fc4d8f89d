package join

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrastructurev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/caps/hostssh"
	"github.com/node-manager/node-manager/controllers/fencingagents"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
	"github.com/node-manager/node-manager/hack/images"
	"github.com/node-manager/node-manager/hack/release"
	"github.com/node-manager/node-manager/templates"
)

// imagesPath is the path of the images under the test's registry, as
// REGISTRY=<host>/images would be given to make push and make release.
const imagesPath = "images"

// installTimeout bounds the waits for pods: images pulled from loopback,
// certificates issued, leaders elected.
const installTimeout = 3 * time.Minute

var apiServicesGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// installation is the release as the test applied it.
type installation struct {
	t        *testing.T
	m        *debianroot.Machine
	host     string // the machine's (and this host's) address
	kubectl  []string
	registry *framework.Registry
	layout   string
	digests  map[string]string
	file     string // the release applied last
	dyn      dynamic.Interface
}

// testTheReleaseRunsAsPods is issue 34's proof on a real kubelet: the
// joined machine, labelled as the cluster's control-plane node (the test's
// only overlay), runs node-manager's release — its own images from a
// loopback registry, pinned by digest — in place of the harness's
// processes. Services reach the pods through a real kube-proxy, pods are
// placed by a real kube-scheduler; the aggregator reaches bashible-apiserver
// through its Service. Shown: the APIService Available and answered by a
// pod, the node's bashible taking an update approved by the
// node-manager-controller pod (which holds the leader Lease): fencing in
// Watchdog mode, after which the real 017_fencing_watchdog step gives the
// device to the fencing agent's user and the agent's pod arms it; early-oom
// serving /metrics to a ServiceAccount token and refusing an anonymous
// scrape; a rolling upgrade of bashible-apiserver under continuous GETs with
// the APIService Available in every sample; removal with hack/uninstall.sh,
// after which a namespace deletes at once and the node is left as it was.
func testTheReleaseRunsAsPods(t *testing.T, m *debianroot.Machine, host string) {
	ctx := context.Background()
	in := &installation{t: t, m: m, host: host}
	in.kubectl = []string{filepath.Join(binDir(), "kubectl"), "--kubeconfig=" + adminKubeconfig(t)}
	var err error
	if in.dyn, err = dynamic.NewForConfig(f.CP.AdminConfig()); err != nil {
		fatalf(t, "%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			in.logPods()
		}
	})

	// The images make images built, in a registry the machine's containerd
	// pulls from (loopback, plain HTTP, as containerd speaks to localhost).
	enter("pushing the images to the loopback registry")
	in.layout = filepath.Join(imagesDir(), "oci")
	if _, err := os.Stat(filepath.Join(in.layout, "index.json")); err != nil {
		fatalf(t, "no images in %s: run make images first (make test-e2e does): %v", in.layout, err)
	}
	in.registry = framework.StartRegistry(t)
	in.digests = map[string]string{}
	for _, p := range in.registry.PushLayout(t, in.layout, imagesPath, "") {
		in.digests[p.Name] = p.Digest.String()
	}

	// What a cluster has and the harness lacks: a scheduler and a
	// kube-proxy (both from the pinned Kubernetes module).
	enter("starting kube-scheduler and kube-proxy")
	startScheduler(t)
	startKubeProxy(t)
	// The test's overlay: the machine is the control-plane node the
	// Deployments select.
	patchNode(t, `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)

	// The harness's bashible-apiserver and node-manager-controller, as a
	// previous installation, go: their APIService and Service first (the
	// release's Service is a ClusterIP one in front of pods, not the
	// harness's ExternalName), then the processes.
	enter("removing the harness's bashible-apiserver and node-manager-controller")
	served := f.Checksum(t, group)
	if err := in.dyn.Resource(apiServicesGVR).Delete(ctx, bashiblev1alpha1.APIServiceName, metav1.DeleteOptions{}); err != nil {
		fatalf(t, "delete the harness's APIService: %v", err)
	}
	if err := f.Kube.CoreV1().Services(deckhousev1.Namespace).Delete(ctx, bashiblev1alpha1.ServiceName, metav1.DeleteOptions{}); err != nil {
		fatalf(t, "delete the harness's Service: %v", err)
	}
	harness.apiServer.Stop()
	harness.controller.Stop()

	// The install: the documented command, timed until the APIService is
	// Available (the cluster's discovery is degraded until then).
	enter("installing the release")
	applied := time.Now()
	in.apply(in.digests)
	// A namespace deleted while the APIService is not yet Available waits
	// for it (the namespace controller must list every API first).
	during := in.deleteNamespace()
	in.waitAPIServiceAvailable(installTimeout)
	t.Logf("install: kubectl apply → APIService Available: %s", time.Since(applied).Round(100*time.Millisecond))
	t.Logf("install: a namespace deleted right after kubectl apply was gone after %s", during().Round(100*time.Millisecond))
	for _, d := range []string{deckhousev1.BashibleAPIServerName, deckhousev1.NodeManagerControllerName, deckhousev1.CAPSControllerManagerName, infrastructurev1alpha1.CAPIControllerManagerName} {
		in.waitDeploymentRolledOut(d, installTimeout)
	}
	in.waitDaemonSetReady(deckhousev1.EarlyOOMName, installTimeout)
	t.Logf("install: kubectl apply → every Deployment and DaemonSet rolled out: %s", time.Since(applied).Round(100*time.Millisecond))

	// Answered by a pod: the harness's server is gone.
	enter("reading bashibles through the aggregator")
	out, err := in.run("get", "bashibles", "-o", "name")
	if err != nil || !strings.Contains(out, group) {
		errorf(t, "kubectl get bashibles: %v\n%s", err, out)
	}
	if now := f.Checksum(t, group); now != served {
		errorf(t, "the pods serve group %s with checksum %s, the harness served %s: the same inputs must render the same bundle", group, now, served)
	}
	in.checkLeaseHeldByPod(deckhousev1.NodeManagerControllerName)

	// early-oom's /metrics: a ServiceAccount token allowed /metrics reads
	// them, an anonymous scrape is refused.
	enter("scraping early-oom's /metrics")
	token := metricsReaderToken(t)
	oom := in.podOf(deckhousev1.EarlyOOMName)
	oomMetrics := "https://" + net.JoinHostPort(oom.Status.PodIP, "9681") + "/metrics"
	if code, body := scrape(t, oomMetrics, token); code != http.StatusOK || !strings.Contains(body, "early_oom_") {
		errorf(t, "early-oom's /metrics with a token: %d\n%s", code, tail(body, 10))
	}
	if code, _ := scrape(t, oomMetrics, ""); code != http.StatusUnauthorized && code != http.StatusForbidden {
		errorf(t, "early-oom's /metrics without a token answered %d, want 401 or 403", code)
	}

	// A static host bootstrapped over SSH by the caps-controller-manager
	// pod, through the capi-controller-manager pods' Machines.
	enter("bootstrapping a StaticInstance from the CAPS pod")
	in.bootstrapStaticInstance()

	// An update approved by the node-manager-controller pod: fencing in
	// Watchdog mode. The kernel's softdog cannot be loaded in a test
	// machine (it would reset the host): modprobe softdog makes a stand-in
	// character device, as root:root 0600 as the kernel's own; the real
	// step must give it to the agent's user.
	enter("fencing the group in Watchdog mode")
	debianroot.WriteFile(t, filepath.Join(m.Root, "usr/local/sbin/modprobe"), softdogStandIn, 0o755)
	update := time.Now()
	g, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		fatalf(t, "%v", err)
	}
	g.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog, Watchdog: &deckhousev1.WatchdogSpec{Timeout: "2m"}}
	if _, err := f.NM.DeckhouseV1().NodeGroups().Update(ctx, g, metav1.UpdateOptions{}); err != nil {
		fatalf(t, "%v", err)
	}
	fenced := f.WaitChecksum(t, group, func(s string) bool { return s != "" && s != served })
	waitApplied(t, fenced)
	t.Logf("fencing on → applied on the node through the approval of the controller pod: %s", time.Since(update).Round(100*time.Millisecond))
	if out := m.MustRun("stat -c '%u:%g %a %F' /dev/watchdog"); strings.TrimSpace(out) != fmt.Sprintf("%d:0 600 character special file", deckhousev1.FencingAgentUID) {
		errorf(t, "after 017_fencing_watchdog /dev/watchdog is %q, want the agent's user's, mode 0600", strings.TrimSpace(out))
	}
	agentDS := fencingagents.DaemonSetName(group)
	in.waitDaemonSetReady(agentDS, installTimeout)
	agentMetrics := "https://" + net.JoinHostPort(host, strconv.Itoa(fencingagents.MetricsPort)) + "/metrics"
	waitFor(t, "the fencing agent's pod to arm the watchdog", time.Minute, func(context.Context) (bool, error) {
		_, body := scrape(t, agentMetrics, token)
		return strings.Contains(body, "\nfencing_agent_armed 1\n"), nil
	})
	if holders := m.MustRun(`for p in /proc/[0-9]*; do if ls -l "$p/fd" 2>/dev/null | grep -q ' -> /dev/watchdog$'; then cat "$p/comm"; fi; done`); strings.TrimSpace(holders) != deckhousev1.FencingAgentName {
		errorf(t, "the processes holding /dev/watchdog open: %q, want the fencing agent alone", holders)
	}

	// A rolling upgrade of bashible-apiserver to a rebuilt image under
	// continuous GETs: only retryable 503s, the APIService Available in
	// every sample, no node re-configured.
	enter("upgrading bashible-apiserver under GETs")
	atUpgrade := unitStarts(t, m)
	next := in.rebuiltImage(deckhousev1.BashibleAPIServerName)
	probe := in.startProbing(group)
	upgraded := time.Now()
	in.apply(next)
	in.waitDeploymentRolledOut(deckhousev1.BashibleAPIServerName, installTimeout, next[deckhousev1.BashibleAPIServerName])
	r := probe.stop()
	t.Logf("upgrade: %s; %d GETs, %d answered 200, %d 503, other: %v; %d APIService samples, %d not Available",
		time.Since(upgraded).Round(100*time.Millisecond), r.gets, r.ok, r.unavailable, r.other, r.samples, r.notAvailable)
	if len(r.other) > 0 || r.notAvailable > 0 || r.ok == 0 {
		errorf(t, "during the upgrade: GET failures other than 503: %v; APIService not Available in %d of %d samples", r.other, r.notAvailable, r.samples)
	}
	if sum := f.Checksum(t, group); sum != fenced {
		errorf(t, "the upgrade changed the group's checksum %s → %s", fenced, sum)
	}
	if now := unitStarts(t, m); !mapsEqual(now, atUpgrade) {
		errorf(t, "the upgrade restarted units on the node: before %v, after %v", atUpgrade, now)
	}

	// Removal: the documented script; then namespace deletion works and the
	// node is left as it is.
	enter("removing the release")
	removed := time.Now()
	cmd := exec.Command(filepath.Join(f.Root, "hack", "uninstall.sh"), in.file)
	cmd.Env = append(os.Environ(), "KUBECTL="+strings.Join(in.kubectl, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		fatalf(t, "hack/uninstall.sh: %v\n%s", err, tail(string(out), 30))
	}
	t.Logf("removal: hack/uninstall.sh took %s", time.Since(removed).Round(100*time.Millisecond))
	t.Logf("removal: a namespace deleted in %s", in.deleteNamespace()().Round(100*time.Millisecond))
	node, err := f.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil || !ready(node) || node.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != fenced {
		errorf(t, "after the removal the node should be Ready with its configuration %s: %v %v", fenced, err, node)
	}
}

// deleteNamespace creates a namespace and deletes it; the returned
// function waits until it is gone (a minute at most) and says how long
// that took from the deletion.
func (in *installation) deleteNamespace() func() time.Duration {
	t, ctx := in.t, framework.Context(in.t)
	ns, err := f.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-deleted-"}}, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "%v", err)
	}
	deleted := time.Now()
	if err := f.Kube.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		fatalf(t, "%v", err)
	}
	return func() time.Duration {
		waitFor(t, "namespace "+ns.Name+" to be deleted", time.Minute, func(ctx context.Context) (bool, error) {
			_, err := f.Kube.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		return time.Since(deleted)
	}
}

// softdogStandIn is the machine's modprobe while the test runs: softdog is
// a character device made as the kernel makes /dev/watchdog (root:root
// 0600); the memory device "null" (1:3), which a container's device rules
// admit, stands in for it; everything else is the real modprobe.
const softdogStandIn = `#!/bin/sh
case " $* " in
  *" -r softdog "*) echo "modprobe: FATAL: Module softdog is in use." >&2; exit 1 ;;
  *" softdog "*) [ -e /dev/watchdog ] || mknod -m 0600 /dev/watchdog c 1 3; exit 0 ;;
esac
exec /usr/sbin/modprobe "$@"
`

// harness are the suite's own bashible-apiserver and node-manager-controller
// processes (setUp), which the install test replaces with the release.
var harness struct {
	apiServer  interface{ Stop() }
	controller interface{ Stop() }
}

func binDir() string {
	if d := os.Getenv("NODE_MANAGER_E2E_PREBUILT"); d != "" {
		return d
	}
	return filepath.Join(f.Root, "bin")
}

// imagesDir is where make images put the images (IMAGES_DIR).
func imagesDir() string {
	if d := os.Getenv("NODE_MANAGER_E2E_IMAGES"); d != "" {
		return d
	}
	return filepath.Join(f.Root, ".local", "images")
}

func adminKubeconfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := f.CP.WriteKubeconfig(path); err != nil {
		fatalf(t, "%v", err)
	}
	return path
}

// componentKubeconfig is a kubeconfig of user (a client certificate of the
// cluster's CA).
func componentKubeconfig(t *testing.T, user string) string {
	cert, key, err := f.CP.IssueClientCert(user)
	if err != nil {
		fatalf(t, "%v", err)
	}
	path := filepath.Join(t.TempDir(), strings.ReplaceAll(user, ":", "-")+".kubeconfig")
	if err := f.CP.WriteClientKubeconfig(path, user, cert, key); err != nil {
		fatalf(t, "%v", err)
	}
	return path
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf(t, "%v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startScheduler runs kube-scheduler as system:kube-scheduler, whom the
// default RBAC binds.
func startScheduler(t *testing.T) {
	kc := componentKubeconfig(t, "system:kube-scheduler")
	port := freePort(t)
	p, err := f.CP.StartProcess("kube-scheduler", filepath.Join(binDir(), "kube-scheduler"), []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--v=1",
	}, port)
	if err != nil {
		fatalf(t, "start kube-scheduler: %v", err)
	}
	t.Cleanup(p.Stop)
}

// startKubeProxy runs kube-proxy for the machine, in this host's network
// namespace, which the machine shares: its iptables rules route the
// ClusterIPs of Services to pods (and the kubernetes Service to the API).
// It leaves the host's conntrack settings alone and takes its rules away
// when the test ends.
func startKubeProxy(t *testing.T) {
	bin := filepath.Join(binDir(), "kube-proxy")
	kc := componentKubeconfig(t, "system:kube-proxy")
	healthz, metrics := freePort(t), freePort(t)
	p, err := f.CP.StartProcess("kube-proxy", bin, []string{
		"--kubeconfig=" + kc, "--hostname-override=" + nodeName, "--proxy-mode=iptables",
		"--cluster-cidr=" + podSubnet, "--iptables-localhost-nodeports=false",
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(healthz), "--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metrics),
		"--v=1",
	}, healthz, metrics)
	if err != nil {
		fatalf(t, "start kube-proxy: %v", err)
	}
	t.Cleanup(func() {
		p.Stop()
		if out, err := exec.Command(bin, "--cleanup", "--proxy-mode=iptables").CombinedOutput(); err != nil {
			t.Logf("kube-proxy --cleanup: %v\n%s", err, out)
		}
	})
}

func patchNode(t *testing.T, patch string) {
	if _, err := f.Kube.CoreV1().Nodes().Patch(framework.Context(t), nodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		fatalf(t, "patch Node %s: %v", nodeName, err)
	}
}

func (in *installation) run(args ...string) (string, error) {
	out, err := exec.Command(in.kubectl[0], append(in.kubectl[1:], args...)...).CombinedOutput()
	return string(out), err
}

// apply generates the release with digests and applies it as
// docs/install.md says (server-side; --force-conflicts, as over a previous
// installation's field managers).
func (in *installation) apply(digests map[string]string) {
	t := in.t
	objs, err := release.Build(framework.Context(t), release.Options{
		Root: f.Root, Kubectl: in.kubectl[0], Registry: in.registry.Host + "/" + imagesPath, Digests: digests,
	})
	if err != nil {
		fatalf(t, "make the release: %v", err)
	}
	data, err := release.Encode("# node-manager, the join suite's release\n", objs)
	if err != nil {
		fatalf(t, "%v", err)
	}
	in.file = filepath.Join(t.TempDir(), "node-manager.yaml")
	if err := os.WriteFile(in.file, data, 0o644); err != nil {
		fatalf(t, "%v", err)
	}
	if out, err := in.run("apply", "--server-side", "--force-conflicts", "-f", in.file); err != nil {
		fatalf(t, "kubectl apply --server-side -f node-manager.yaml: %v\n%s", err, tail(out, 30))
	}
}

func (in *installation) apiServiceAvailable(ctx context.Context) (bool, string) {
	obj, err := in.dyn.Resource(apiServicesGVR).Get(ctx, bashiblev1alpha1.APIServiceName, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	return false, "no Available condition"
}

func (in *installation) waitAPIServiceAvailable(timeout time.Duration) {
	var last string
	waitFor(in.t, "APIService "+bashiblev1alpha1.APIServiceName+" Available", timeout, func(ctx context.Context) (bool, error) {
		ok, why := in.apiServiceAvailable(ctx)
		if !ok && why != last {
			last = why
			in.t.Logf("APIService: %s", why)
		}
		return ok, nil
	})
}

// waitDeploymentRolledOut waits until every replica of the Deployment is
// updated and available, its pods (with image, when given) Ready.
func (in *installation) waitDeploymentRolledOut(name string, timeout time.Duration, digest ...string) {
	waitFor(in.t, "Deployment "+name+" rolled out", timeout, func(ctx context.Context) (bool, error) {
		d, err := f.Kube.AppsV1().Deployments(deckhousev1.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want {
			return false, in.podFailure(d.Spec.Selector.MatchLabels)
		}
		if len(digest) > 0 && !strings.HasSuffix(d.Spec.Template.Spec.Containers[0].Image, "@"+digest[0]) {
			return false, nil
		}
		return true, nil
	})
}

func (in *installation) waitDaemonSetReady(name string, timeout time.Duration) {
	waitFor(in.t, "DaemonSet "+name+" ready on the machine", timeout, func(ctx context.Context) (bool, error) {
		d, err := f.Kube.AppsV1().DaemonSets(deckhousev1.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.DesiredNumberScheduled < 1 || s.NumberReady != s.DesiredNumberScheduled || s.UpdatedNumberScheduled != s.DesiredNumberScheduled {
			return false, in.podFailure(d.Spec.Selector.MatchLabels)
		}
		return true, nil
	})
}

// podFailure is an error for a pod of selector that cannot become Ready
// (an image that cannot be pulled, a container crashing): the wait stops
// there with the pod's own words.
func (in *installation) podFailure(selector map[string]string) error {
	pods, err := f.Kube.CoreV1().Pods(deckhousev1.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: selector})})
	if err != nil {
		return nil
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && slices.Contains([]string{"ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "InvalidImageName"}, w.Reason) {
				return fmt.Errorf("pod %s: %s: %s\n%s", p.Name, w.Reason, w.Message, in.containerLog(p, c.Name))
			}
		}
	}
	return nil
}

// containerLog is the tail of a container's log, read on the machine (the
// API server reaches no kubelet by the machine's name here).
func (in *installation) containerLog(p corev1.Pod, container string) string {
	dir := fmt.Sprintf("/var/log/pods/%s_%s_%s/%s", p.Namespace, p.Name, p.UID, container)
	out, _ := in.m.Run(context.Background(), "tail -q -n 30 "+dir+"/*.log 2>&1 | cut -c1-600")
	return out
}

// logPods logs each pod of the namespace with its state and log tail.
func (in *installation) logPods() {
	pods, err := f.Kube.CoreV1().Pods(deckhousev1.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		in.t.Logf("list the pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			in.t.Logf("pod %s (%s, ready %v, restarts %d, state %+v):\n%s", p.Name, p.Status.Phase, c.Ready, c.RestartCount, c.State, in.containerLog(p, c.Name))
		}
	}
}

func (in *installation) podOf(app string) corev1.Pod {
	pods, err := f.Kube.CoreV1().Pods(deckhousev1.Namespace).List(framework.Context(in.t), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil || len(pods.Items) == 0 {
		fatalf(in.t, "the pods of %s: %v %v", app, err, pods)
	}
	return pods.Items[0]
}

// checkLeaseHeldByPod waits until the component's leader Lease is held by
// one of its pods.
func (in *installation) checkLeaseHeldByPod(component string) {
	waitFor(in.t, "a "+component+" pod to hold the leader Lease", installTimeout, func(ctx context.Context) (bool, error) {
		l, err := f.Kube.CoordinationV1().Leases(deckhousev1.Namespace).Get(ctx, component, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		p, err := f.Kube.CoreV1().Pods(deckhousev1.Namespace).Get(ctx, *l.Spec.HolderIdentity, metav1.GetOptions{})
		return err == nil && p.Labels["app"] == component && p.Spec.NodeName == nodeName, nil
	})
}

// rebuiltImage is the image of name as a new version would build it (the
// same binary, another version label: another digest), pushed; it returns
// the digests with it.
func (in *installation) rebuiltImage(name string) map[string]string {
	imgs, err := images.ReadLayout(in.layout)
	if err != nil {
		fatalf(in.t, "%v", err)
	}
	i := slices.IndexFunc(imgs, func(n images.Named) bool { return n.Name == name })
	if i < 0 {
		fatalf(in.t, "no image %s in %s", name, in.layout)
	}
	cfg, err := imgs[i].Image.ConfigFile()
	if err != nil {
		fatalf(in.t, "%v", err)
	}
	c := cfg.Config.DeepCopy()
	c.Labels["org.opencontainers.image.version"] += "-e2e-upgrade"
	img, err := mutate.Config(imgs[i].Image, *c)
	if err != nil {
		fatalf(in.t, "%v", err)
	}
	in.registry.Push(in.t, imagesPath+"/"+name, "e2e-upgrade", img)
	d, err := img.Digest()
	if err != nil {
		fatalf(in.t, "%v", err)
	}
	next := map[string]string{}
	for k, v := range in.digests {
		next[k] = v
	}
	next[name] = d.String()
	return next
}

// probe GETs a group's bundle through the aggregator as fast as it is
// answered, and samples the APIService's Available condition, until stop.
type probe struct {
	stopped chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	res     probeResult
}

type probeResult struct {
	gets, ok, unavailable int
	other                 []string
	samples, notAvailable int
}

func (in *installation) startProbing(group string) *probe {
	t := in.t
	transport, err := rest.TransportFor(f.CP.AdminConfig())
	if err != nil {
		fatalf(t, "%v", err)
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	url := f.CP.APIServerURL + "/apis/" + bashiblev1alpha1.SchemeGroupVersion.Group + "/v1alpha1/nodegroupbundles/" + group
	p := &probe{stopped: make(chan struct{})}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.stopped:
				return
			default:
			}
			code, msg := 0, ""
			resp, err := client.Get(url)
			if err != nil {
				msg = err.Error()
			} else {
				code = resp.StatusCode
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				_ = resp.Body.Close()
				msg = strings.TrimSpace(string(body))
			}
			p.mu.Lock()
			p.res.gets++
			switch code {
			case http.StatusOK:
				p.res.ok++
			case http.StatusServiceUnavailable:
				p.res.unavailable++
			default:
				if len(p.res.other) < 10 {
					p.res.other = append(p.res.other, fmt.Sprintf("%d %s", code, msg))
				}
			}
			p.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stopped:
				return
			case <-tick.C:
			}
			ok, _ := in.apiServiceAvailable(context.Background())
			p.mu.Lock()
			p.res.samples++
			if !ok {
				p.res.notAvailable++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *probe) stop() probeResult {
	close(p.stopped)
	p.wg.Wait()
	return p.res
}

// metricsReaderToken is a token of a ServiceAccount allowed GET /metrics,
// as a cluster's Prometheus has.
func metricsReaderToken(t *testing.T) string {
	ctx := framework.Context(t)
	name := "e2e-metrics-reader"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: metav1.NamespaceDefault}}}
	if _, err := f.Kube.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		fatalf(t, "%v", err)
	}
	if _, err := f.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		fatalf(t, "%v", err)
	}
	if _, err := f.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		fatalf(t, "%v", err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = f.Kube.RbacV1().ClusterRoleBindings().Delete(bg, name, metav1.DeleteOptions{})
		_ = f.Kube.RbacV1().ClusterRoles().Delete(bg, name, metav1.DeleteOptions{})
		_ = f.Kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Delete(bg, name, metav1.DeleteOptions{})
	})
	tok, err := f.Kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "%v", err)
	}
	return tok.Status.Token
}

// scrape GETs a component's /metrics (self-signed serving certificate)
// with token, or anonymously when it is empty.
func scrape(t *testing.T, url, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		fatalf(t, "%v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the components' self-signed serving certificates
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitApplied waits until the node reports sum applied on its Instance,
// approved (WaitingApproval False, Approved).
func waitApplied(t *testing.T, sum string) {
	waitFor(t, "Instance "+nodeName+" to report "+sum[:12]+" approved and applied", joinTimeout, func(ctx context.Context) (bool, error) {
		inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		approved, applied := false, false
		for _, c := range inst.Status.Conditions {
			approved = approved || c.Type == "WaitingApproval" && c.Status == metav1.ConditionFalse && c.Reason == "Approved"
			applied = applied || c.Type == "BashibleReady" && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, sum[:12])
		}
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return approved && applied && err == nil && n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == sum, nil
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// staticHostAddress is the simulated static host's address: test-only,
// outside the pods' range, on no network but this host's.
const staticHostAddress = "10.244.16.1"

// staticGroup is the group of the StaticInstance the CAPS pod bootstraps.
const staticGroup = "e2e-static"

// bootstrapStaticInstance proves caps-controller-manager's pod against a
// simulated host (Debian's sshd in a root of its own, with the suites'
// stubs, on this host's address, which the pod reaches): a Static group
// asks for one StaticInstance; the capi-controller-manager pods make its
// Machine; the CAPS pod logs in over SSH from its pod address (the host's
// sshd log says so), writes the host's identity and runs the group's
// bootstrap, as served by the bashible-apiserver pods, which fetches
// bashible from the API. The test then plays the kubelet (a Node with the
// providerID CAPS wrote and a configuration recorded), and the instance is
// Running.
func (in *installation) bootstrapStaticInstance() {
	t, ctx := in.t, framework.Context(in.t)
	logins := framework.NewSSHLogins(t)
	root := debianroot.Fresh(t, templates.BuiltinVersions().BasePackages["debian"])
	debianroot.InstallStubs(t, root)
	// The kubelet's bootstrap kubeconfig, which the kubelet step writes on a
	// real host: bashible's first run then waits for the (played) kubelet.
	debianroot.WriteFile(t, filepath.Join(root, "etc/kubernetes/bootstrap-kubelet.conf"), "apiVersion: v1\nkind: Config\n", 0o600)
	// The API's address that its serving certificate names is loopback
	// (the host shares this host's network): the bootstrap is pointed at it
	// the documented way, as the machine's is; sshd's PAM session reads it.
	debianroot.WriteFile(t, filepath.Join(root, "etc/environment"), "BASHIBLE_API_ENDPOINTS="+apiServerHostPort(t)+"\n", 0o644)
	const name = "e2e-static-1"
	// The host has an address of its own, on the pods' bridge of this host
	// (the machine's address is a node's, which CAPS refuses to bootstrap).
	if out, err := exec.Command("ip", "addr", "add", staticHostAddress+"/32", "dev", bridge).CombinedOutput(); err != nil {
		fatalf(t, "give the static host its address: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", staticHostAddress+"/32", "dev", bridge).Run() })
	h := framework.StartSSHHost(t, name, root, staticHostAddress, freePort(t), logins)

	creds := f.NM.DeckhouseV1alpha2().SSHCredentialses()
	if _, err := creds.Create(ctx, &deckhousev1alpha2.SSHCredentials{ObjectMeta: metav1.ObjectMeta{Name: staticGroup},
		Spec: deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: base64.StdEncoding.EncodeToString(logins.RootKey), SSHPort: int32(h.Port)}}, metav1.CreateOptions{}); err != nil {
		fatalf(t, "create SSHCredentials: %v", err)
	}
	role := map[string]string{"role": staticGroup}
	inst := &deckhousev1alpha2.StaticInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: role, Annotations: map[string]string{deckhousev1.SSHHostKeyAnnotation: h.HostKey}},
		Spec: deckhousev1alpha2.StaticInstanceSpec{Address: h.Address,
			CredentialsRef: &corev1.ObjectReference{Kind: "SSHCredentials", APIVersion: deckhousev1alpha2.SchemeGroupVersion.String(), Name: staticGroup}},
	}
	if _, err := f.NM.DeckhouseV1alpha2().StaticInstances().Create(ctx, inst, metav1.CreateOptions{}); err != nil {
		fatalf(t, "create StaticInstance: %v", err)
	}
	started := time.Now()
	if _, err := f.NM.DeckhouseV1().NodeGroups().Create(ctx, framework.NewGroup(staticGroup, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.StaticInstances = &deckhousev1.StaticInstancesSpec{Count: 1, LabelSelector: &metav1.LabelSelector{MatchLabels: role}}
	}), metav1.CreateOptions{}); err != nil {
		fatalf(t, "create NodeGroup %s: %v", staticGroup, err)
	}

	providerIDFile := filepath.Join(root, hostssh.ProviderIDFile)
	waitFor(t, "the CAPS pod to write the host's identity over SSH", installTimeout, func(context.Context) (bool, error) {
		_, err := os.Stat(providerIDFile)
		return err == nil, nil
	})
	sshdLog, err := os.ReadFile(filepath.Join(filepath.Dir(root), name+"-sshd.log"))
	if err != nil || !strings.Contains(string(sshdLog), "Accepted publickey for root from "+strings.TrimSuffix(podSubnet, "0/24")) {
		errorf(t, "the host's sshd log shows no login from a pod address of %s: %v\n%s", podSubnet, err, tail(string(sshdLog), 10))
	}
	waitFor(t, "the host's bootstrap to fetch bashible.sh", installTimeout, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(root, "var/lib/bashible/bashible.sh"))
		return err == nil, nil
	})
	providerID := strings.TrimSpace(framework.ReadFile(t, providerIDFile))
	node := framework.NewNode(name, staticGroup)
	node.Spec.ProviderID = providerID
	// What bashible records once the kubelet has joined, which CAPS waits
	// for: the played kubelet's stand-in.
	node.Annotations = map[string]string{deckhousev1.ConfigurationChecksumAnnotation: "e2e"}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.Address}, {Type: corev1.NodeHostName, Address: name}}
	if _, err := f.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		fatalf(t, "register Node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	waitFor(t, "StaticInstance "+name+" Running with its Node", installTimeout, func(ctx context.Context) (bool, error) {
		si, err := f.NM.DeckhouseV1alpha2().StaticInstances().Get(ctx, name, metav1.GetOptions{})
		return err == nil && si.Status.CurrentStatus != nil && si.Status.CurrentStatus.Phase == deckhousev1alpha2.StaticInstanceRunning &&
			si.Status.NodeRef != nil && si.Status.NodeRef.Name == name, nil
	})
	t.Logf("static group created → StaticInstance bootstrapped by the CAPS pod and Running: %s", time.Since(started).Round(100*time.Millisecond))
	// Cluster API's own view: its Machine found the Node, through the
	// Cluster's kubeconfig, which must not need the cluster's DNS (there is
	// none here, as before a cluster's DNS has a node to run on).
	machines := schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	waitFor(t, "the Machine of "+name+" to reference its Node", installTimeout, func(ctx context.Context) (bool, error) {
		list, err := in.dyn.Resource(machines).Namespace(deckhousev1.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, m := range list.Items {
			if ref, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); ref == name {
				return true, nil
			}
		}
		return false, nil
	})
	// The host's bootstrap session (bashible waiting for a kubelet that is
	// played) ends with the host.
	h.Stop()
}
