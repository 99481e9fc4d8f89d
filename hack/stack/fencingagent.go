package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// InstallFencingAgent applies fencing-agent's ServiceAccount and RBAC from
// manifests/ (its admission policy is among manifests/policies).
func InstallFencingAgent(ctx context.Context, root string, applier *controlplane.Applier) error {
	return applier.ApplyFiles(ctx, filepath.Join(root, "manifests", deckhousev1.FencingAgentName, "rbac.yaml"))
}

// FencingAgentToken is what a fencing-agent pod on node authenticates
// with: a token of the fencing-agent ServiceAccount bound to a Pod that is
// bound to node (as a DaemonSet's pod and its projected token are), so
// kube-apiserver adds the node to the identity (the extra
// authentication.kubernetes.io/node-name) that the agent's admission
// policy compares with the Node written. The Pod never runs (there is no
// kubelet); it tolerates every taint, so nothing evicts it while the test
// runs, which would invalidate the token. It returns the token and the
// Pod's name, for the caller to delete.
func FencingAgentToken(ctx context.Context, kube kubernetes.Interface, node string) (token, pod string, err error) {
	pods := kube.CoreV1().Pods(deckhousev1.Namespace)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.FencingAgentName + "-" + node, Namespace: deckhousev1.Namespace},
		Spec: corev1.PodSpec{
			ServiceAccountName:           deckhousev1.FencingAgentName,
			NodeName:                     node,
			AutomountServiceAccountToken: new(bool),
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:                   []corev1.Container{{Name: deckhousev1.FencingAgentName, Image: deckhousev1.FencingAgentName}},
		},
	}
	created, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = pods.Get(ctx, p.Name, metav1.GetOptions{})
	}
	if err != nil {
		return "", "", fmt.Errorf("create the fencing-agent Pod on %s: %w", node, err)
	}
	expiry := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(deckhousev1.Namespace).CreateToken(ctx, deckhousev1.FencingAgentName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: created.Name, UID: created.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("request a fencing-agent token bound to Pod %s: %w", created.Name, err)
	}
	return tr.Status.Token, created.Name, nil
}

// FencingAgentOptions configure one fencing-agent process.
type FencingAgentOptions struct {
	Node, Group string
	// Mode is Watchdog (default) or Notify.
	Mode string
	// Token is the agent's credential (FencingAgentToken).
	Token string
	// APIServer is host:port the agent reaches kube-apiserver at (a
	// proxy the test can cut); empty means kube-apiserver itself.
	APIServer string
	// ServicePath, when set, is host:port the agent's kubeconfig names
	// instead of APIServer: the Service VIP path, the in-cluster
	// configuration of a pod. APIServer is then passed as --api-server,
	// as the DaemonSet passes the node's local API proxy.
	ServicePath string
	// GossipPort is the agent's gossip port on 127.0.0.1 (0: a free one);
	// Peers are the other agents' gossip addresses.
	GossipPort int
	Peers      []string
	// GossipKeyDir is the group's gossip keyring as the kubelet would mount
	// it (framework.MountGossipKeys).
	GossipKeyDir string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// FencingAgent is a running fencing-agent whose watchdog is a FIFO the
// harness reads (Device).
type FencingAgent struct {
	*controlplane.Process
	Node string
	// Port serves /metrics and the probes on 127.0.0.1 over HTTPS.
	Port       int
	GossipPort int
	Device     *WatchdogRecorder
	admin      tls.Certificate
}

// FencingAgentTimings are the e2e agents' timings: a loop turn every
// 300 ms, each API check bounded at 200 ms, gossip probes every 200 ms, a
// node's Lease stale for the agent after 2 s.
var FencingAgentTimings = []string{"--feed-interval=300ms", "--api-timeout=200ms", "--rejoin-interval=1s", "--gossip-probe-interval=200ms", "--lease-stale-after=2s"}

// StartFencingAgent starts fencing-agent for opts.Node with a FIFO as its
// watchdog, reaching the API with opts.Token through opts.APIServer.
func (e *Environment) StartFencingAgent(ctx context.Context, opts FencingAgentOptions) (*FencingAgent, error) {
	cp := e.CP
	if opts.Mode == "" {
		opts.Mode = deckhousev1.FencingModeWatchdog
	}
	if opts.APIServer == "" {
		opts.APIServer = strings.TrimPrefix(cp.APIServerURL, "https://")
	}
	dir := filepath.Join(cp.Dir(), deckhousev1.FencingAgentName+"-"+opts.Node)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	server := opts.APIServer
	if opts.ServicePath != "" {
		server = opts.ServicePath
	}
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: "https://" + server, CertificateAuthorityData: cp.CACertPEM()}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"agent": {Token: opts.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: "agent"}},
		CurrentContext: "local",
	}, kubeconfig); err != nil {
		return nil, err
	}
	clientCA, admin, err := metricsClients(cp, dir)
	if err != nil {
		return nil, err
	}
	device, err := NewWatchdogRecorder(filepath.Join(dir, "watchdog"))
	if err != nil {
		return nil, err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		device.Close()
		return nil, err
	}
	if opts.GossipPort == 0 {
		if opts.GossipPort, err = controlplane.FreePort(); err != nil {
			device.Close()
			return nil, err
		}
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--client-ca-file=" + clientCA,
		"--node-name=" + opts.Node,
		"--node-group=" + opts.Group,
		"--mode=" + opts.Mode,
		"--watchdog-device=" + device.Path,
		"--listen-address=127.0.0.1:" + strconv.Itoa(port),
		"--gossip-bind-address=127.0.0.1",
		"--gossip-advertise-address=127.0.0.1",
		"--gossip-port=" + strconv.Itoa(opts.GossipPort),
		"--peers=" + strings.Join(opts.Peers, ","),
		"--gossip-key-dir=" + opts.GossipKeyDir,
		"--v=2",
	}, FencingAgentTimings...)
	if opts.ServicePath != "" {
		args = append(args, "--api-server=https://"+opts.APIServer)
	}
	args = append(args, opts.ExtraArgs...)
	proc, err := cp.StartProcess(deckhousev1.FencingAgentName+"-"+opts.Node, filepath.Join(e.Root, "bin", deckhousev1.FencingAgentName), args, port, opts.GossipPort)
	if err != nil {
		device.Close()
		return nil, err
	}
	return &FencingAgent{Process: proc, Node: opts.Node, Port: port, GossipPort: opts.GossipPort, Device: device, admin: admin}, nil
}

// GossipAddress is where the agent's peers reach it.
func (a *FencingAgent) GossipAddress() string { return "127.0.0.1:" + strconv.Itoa(a.GossipPort) }

// Readyz is the agent's /readyz: the status code and the body, which says
// what the agent does and why. The probes need no credentials.
func (a *FencingAgent) Readyz(ctx context.Context) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	code, body, err := a.GetAs(ctx, "/readyz", Credentials{})
	return code, strings.TrimSpace(body), err
}

// GetAs fetches a path of the agent's metrics and probes endpoint
// presenting cred; Metrics fetches /metrics as the control plane's admin.
func (a *FencingAgent) GetAs(ctx context.Context, path string, cred Credentials) (int, string, error) {
	return getAs(ctx, "https://127.0.0.1:"+strconv.Itoa(a.Port)+path, cred)
}

// Metrics fetches /metrics as the control plane's admin.
func (a *FencingAgent) Metrics(ctx context.Context) (int, string, error) {
	return a.GetAs(ctx, "/metrics", Credentials{Cert: &a.admin})
}

// Signal sends sig to the agent's process (SIGSTOP freezes it, gossip
// included, as a hung node would be; SIGCONT resumes it).
func (a *FencingAgent) Signal(sig syscall.Signal) error { return syscall.Kill(a.PID(), sig) }

// Stop stops the agent (SIGTERM, as the kubelet does) and the recorder.
func (a *FencingAgent) Stop() {
	a.Process.Stop()
	a.Device.Close()
}

// WatchdogRecorder is a FIFO standing in for /dev/watchdog: it records
// every byte the agent writes, so a test sees each feed and each magic
// close ('V') as it happens.
type WatchdogRecorder struct {
	Path string
	f    *os.File

	mu          sync.Mutex
	feeds       int
	magicCloses int
	last        byte
	lastWrite   time.Time
}

// NewWatchdogRecorder makes the FIFO at path and starts reading it. The
// FIFO is opened read-write, so the agent's write-only open never waits
// and the FIFO stays open across the agent's closes.
func NewWatchdogRecorder(path string) (*WatchdogRecorder, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("make the watchdog FIFO %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open the watchdog FIFO %s: %w", path, err)
	}
	r := &WatchdogRecorder{Path: path, f: f}
	go r.read()
	return r, nil
}

func (r *WatchdogRecorder) read() {
	buf := make([]byte, 256)
	for {
		n, err := r.f.Read(buf)
		r.mu.Lock()
		for _, b := range buf[:n] {
			if b == 'V' {
				r.magicCloses++
			} else {
				r.feeds++
			}
			r.last = b
			r.lastWrite = time.Now()
		}
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// WatchdogWrites is what the recorder has seen so far.
type WatchdogWrites struct {
	// Feeds counts every byte but 'V'; MagicCloses counts the 'V's.
	Feeds, MagicCloses int
	// Last is the last byte written (0 before any), at LastWrite.
	Last      byte
	LastWrite time.Time
}

// Writes is what the recorder has seen so far.
func (r *WatchdogRecorder) Writes() WatchdogWrites {
	r.mu.Lock()
	defer r.mu.Unlock()
	return WatchdogWrites{Feeds: r.feeds, MagicCloses: r.magicCloses, Last: r.last, LastWrite: r.lastWrite}
}

// Close stops reading.
func (r *WatchdogRecorder) Close() { _ = r.f.Close() }
