// Package earlyoom is the e2e suite of the early-oom agent: the real
// binary, as its ServiceAccount with a token bound to its own pod (as the
// kubelet projects it), with the manifests' RBAC and own-node admission
// policy, on simulated nodes whose pressure, meminfo and cgroup files the
// tests write. Pods are created bound to the simulated nodes directly
// through the API; there is no kubelet, so a deleted pod keeps its
// deletionTimestamp for its grace period.
package earlyoom

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var f = framework.New(framework.Options{})

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	if err := stack.InstallEarlyOOM(ctx, f.Root, f.Env.Applier); err != nil {
		return nil, fmt.Errorf("install early-oom's RBAC: %w", err)
	}
	return nil, nil
}

const mi = int64(1) << 20

// simNode is a simulated node: its Node object, and the directory of the
// files its agent reads (pressure/memory, meminfo, a cgroup v2 tree).
type simNode struct {
	name string
	dir  string
}

// newNode creates Node name in group for the test, with quiet pressure and
// plenty of memory in its files.
func newNode(t *testing.T, name, group string) *simNode {
	t.Helper()
	f.TestNode(t, framework.NewNode(name, group))
	n := &simNode{name: name, dir: t.TempDir()}
	n.write(t, "cgroup/cgroup.controllers", "cpu memory pids\n")
	n.write(t, "meminfo", "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n")
	n.setPressure(t, 0.5, 0.1)
	return n
}

// write writes a file of the node's tree atomically (the agent never
// reads half a file).
func (n *simNode) write(t *testing.T, rel, data string) {
	t.Helper()
	path := filepath.Join(n.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// setPressure writes /proc/pressure/memory with the given avg10 values.
func (n *simNode) setPressure(t *testing.T, some, full float64) {
	t.Helper()
	n.write(t, "pressure/memory", pressureFile(some, full))
}

// podDir is pod p's cgroup under the node's tree (the systemd driver's
// layout for its QoS class).
func podDir(p *corev1.Pod) string {
	uid := strings.ReplaceAll(string(p.UID), "-", "_")
	switch p.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		return "cgroup/kubepods.slice/kubepods-pod" + uid + ".slice"
	case corev1.PodQOSBurstable:
		return "cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice"
	default:
		return "cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid + ".slice"
	}
}

// setUsage gives pod p a cgroup using usageMi of memory, with no limit of
// its own (memory.max "max") unless setLimit gives one.
func (n *simNode) setUsage(t *testing.T, p *corev1.Pod, usageMi int64) {
	t.Helper()
	n.write(t, podDir(p)+"/memory.current", strconv.FormatInt(usageMi*mi, 10)+"\n")
	n.write(t, podDir(p)+"/memory.stat", "anon 1\ninactive_file 0\n")
	if _, err := os.Stat(filepath.Join(n.dir, podDir(p), "memory.max")); err != nil {
		n.write(t, podDir(p)+"/memory.max", "max\n")
	}
}

// setLimit writes pod p's memory.max, as the kubelet sets a pod's limit.
func (n *simNode) setLimit(t *testing.T, p *corev1.Pod, limitMi int64) {
	t.Helper()
	n.write(t, podDir(p)+"/memory.max", strconv.FormatInt(limitMi*mi, 10)+"\n")
}

// setPodPressure writes pod p's own memory.pressure.
func (n *simNode) setPodPressure(t *testing.T, p *corev1.Pod, some, full float64) {
	t.Helper()
	n.write(t, podDir(p)+"/memory.pressure", pressureFile(some, full))
}

// setPodsPressure writes the memory.pressure of the pods' parent cgroup
// (kubepods.slice).
func (n *simNode) setPodsPressure(t *testing.T, some, full float64) {
	t.Helper()
	n.write(t, "cgroup/kubepods.slice/memory.pressure", pressureFile(some, full))
}

func pressureFile(some, full float64) string {
	return fmt.Sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=1\nfull avg10=%.2f avg60=0.00 avg300=0.00 total=1\n", some, full)
}

// podSpec says how a test pod looks.
type podSpec struct {
	requestMi, limitMi int64
	priorityClass      string
}

// newPod creates pod name in namespace bound to node, with the memory
// request and limit of spec (0: none), and deletes it when the test ends.
// It tolerates every taint, so that kube-controller-manager's taint
// eviction leaves it alone on a simulated node that never reports Ready.
func newPod(t *testing.T, namespace, name, node string, spec podSpec, mutations ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	c := corev1.Container{Name: "c", Image: "registry.example/app:1"}
	if spec.requestMi > 0 {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(spec.requestMi*mi, resource.BinarySI)}
	}
	if spec.limitMi > 0 {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(spec.limitMi*mi, resource.BinarySI)}
		// Guaranteed needs CPU too.
		if spec.limitMi == spec.requestMi {
			cpu := *resource.NewMilliQuantity(100, resource.DecimalSI)
			c.Resources.Requests[corev1.ResourceCPU] = cpu
			c.Resources.Limits[corev1.ResourceCPU] = cpu
		}
	}
	grace := int64(30)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName: node, Containers: []corev1.Container{c}, PriorityClassName: spec.priorityClass,
			TerminationGracePeriodSeconds: &grace,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	for _, m := range mutations {
		m(p)
	}
	created, err := f.Kube.CoreV1().Pods(namespace).Create(framework.Context(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	return created
}

// agent is an early-oom agent of a simulated node, with the pod it runs
// as and the token bound to that pod.
type agent struct {
	*stack.EarlyOOM
	pod   *corev1.Pod
	token string
}

// agentIdentity creates the agent's own pod on n (as the DaemonSet would)
// and a ServiceAccount token bound to it, as the kubelet projects one.
func agentIdentity(t *testing.T, n *simNode) (*corev1.Pod, string) {
	t.Helper()
	pod := newPod(t, deckhousev1.Namespace, deckhousev1.EarlyOOMName+"-"+n.name, n.name, podSpec{requestMi: 32, limitMi: 64, priorityClass: "system-node-critical"},
		func(p *corev1.Pod) { p.Spec.ServiceAccountName = deckhousev1.EarlyOOMName })
	expiry := int64(3600)
	tr, err := f.Kube.CoreV1().ServiceAccounts(deckhousev1.Namespace).CreateToken(framework.Context(t), deckhousev1.EarlyOOMName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request a token bound to %s: %v", pod.Name, err)
	}
	return pod, tr.Status.Token
}

// startAgent runs early-oom for n with args after the suite's fast
// sampling (every 100 ms, three samples over full avg10 30 %, then a
// minute's pause, so one test sees one action), and stops it when the test
// ends.
func startAgent(t *testing.T, n *simNode, args ...string) *agent {
	t.Helper()
	pod, token := agentIdentity(t, n)
	a, err := f.Env.StartEarlyOOM(framework.Context(t), stack.EarlyOOMOptions{
		Node: n.name, PodNamespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID), Token: token, Dir: n.dir,
		ExtraArgs: append([]string{"--interval=100ms", "--samples=3", "--full-avg10=30", "--recovery-pause=1m", "--grace-period=5s"}, args...),
	})
	if err != nil {
		t.Fatalf("start early-oom on %s: %v", n.name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("early-oom on %s:\n%s", n.name, a.Tail(40))
		}
		a.Stop()
	})
	return &agent{EarlyOOM: a, pod: pod, token: token}
}
