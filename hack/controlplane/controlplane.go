// Package controlplane starts a real Kubernetes control plane on loopback —
// etcd, kube-apiserver and kube-controller-manager built from the pinned
// hack/tools module — for `make run` and for every e2e suite.
//
// Everything is generated on the fly: a cluster CA, a front-proxy CA for the
// aggregation layer, serving and client certificates and a service account
// key, all for loopback. Each component listens on a free port, logs to a
// file in the control plane's directory, and is stopped (with its whole
// process group) by Stop, which also removes the directory.
package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Names of things inside the cluster that the harness relies on.
const (
	// ServiceCIDR is the cluster's service IP range.
	ServiceCIDR = "10.96.0.0/16"
	// FrontProxyClientName is the CN of the aggregator's client certificate,
	// the only name aggregated servers accept request headers from.
	FrontProxyClientName = "front-proxy-client"
	// AdminUser is the CN of the admin client certificate (group system:masters).
	AdminUser = "node-manager-admin"
	// APIServerDNSName is a name kube-apiserver's serving certificate
	// holds, as a real cluster's does: simulated hosts that resolve it to
	// loopback reach the API by it (stack.PublishLocalAPIServer).
	APIServerDNSName = "kubernetes.default.svc.cluster.local"
)

// Config says where the binaries are and how to run the control plane.
type Config struct {
	// BinDir holds etcd, kube-apiserver and kube-controller-manager. Empty
	// means bin/ at the repository root.
	BinDir string
	// Dir is the working directory for certificates, data and logs. Empty
	// means a fresh temporary directory, removed by Stop.
	Dir string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// StartTimeout bounds the whole start-up. Zero means two minutes.
	StartTimeout time.Duration
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	dir       string
	removeDir bool
	progress  io.Writer

	ca         *authority
	frontProxy *authority

	// APIServerURL is https://127.0.0.1:<port>.
	APIServerURL string
	admin        keyPair
	kcmClient    keyPair

	mu       sync.Mutex // guards procs after Start
	procs    []*process
	stopping chan struct{}
	failed   chan error
	stopOnce sync.Once
	stopErr  error
}

// ProcessInfo describes a running component, for leak checks.
type ProcessInfo struct {
	Name  string
	PID   int
	Ports []int
}

// Start brings up etcd, kube-apiserver and kube-controller-manager and
// returns once the API answers, the controllers are healthy and the
// controller-managed objects every test relies on exist. On failure it
// stops whatever it started and returns an error carrying the failing
// component's log tail.
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	if cfg.BinDir == "" {
		root, rerr := RepoRoot()
		if rerr != nil {
			return nil, rerr
		}
		cfg.BinDir = filepath.Join(root, "bin")
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	cp := &ControlPlane{progress: cfg.Progress, stopping: make(chan struct{}), failed: make(chan error, 1)}
	if cp.progress == nil {
		cp.progress = io.Discard
	}
	if cfg.Dir == "" {
		dir, derr := os.MkdirTemp("", "node-manager-cp-")
		if derr != nil {
			return nil, fmt.Errorf("create control plane directory: %w", derr)
		}
		cp.dir, cp.removeDir = dir, true
	} else {
		if derr := os.MkdirAll(cfg.Dir, 0o700); derr != nil {
			return nil, fmt.Errorf("create control plane directory %s: %w", cfg.Dir, derr)
		}
		cp.dir = cfg.Dir
	}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()

	cp.logf("generating certificates in %s", cp.dir)
	if err := cp.writeCertificates(); err != nil {
		return nil, err
	}
	if err := cp.startEtcd(ctx, cfg.BinDir); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, cfg.BinDir); err != nil {
		return nil, err
	}
	if err := cp.startControllerManager(ctx, cfg.BinDir); err != nil {
		return nil, err
	}
	if err := cp.waitControllersWorking(ctx); err != nil {
		return nil, err
	}
	if err := cp.WriteKubeconfig(cp.KubeconfigPath()); err != nil {
		return nil, err
	}
	for _, p := range cp.procs {
		go cp.watch(p)
	}
	cp.logf("control plane ready at %s", cp.APIServerURL)
	return cp, nil
}

// watch reports p's exit on Failed unless the control plane is stopping.
func (cp *ControlPlane) watch(p *process) {
	select {
	case <-cp.stopping:
	case <-p.done:
		if p.stopping.Load() {
			return
		}
		select {
		case <-cp.stopping:
		case cp.failed <- p.failure(fmt.Errorf("exited unexpectedly: %v", p.waitErr)):
		default: // another component's failure is already reported
		}
	}
}

// Failed delivers an error, with the log tail, when a component exits
// while the control plane is supposed to be running.
func (cp *ControlPlane) Failed() <-chan error { return cp.failed }

func (cp *ControlPlane) logf(format string, args ...any) {
	fmt.Fprintf(cp.progress, "controlplane: "+format+"\n", args...)
}

// Dir is the control plane's working directory (certificates, data, logs).
func (cp *ControlPlane) Dir() string { return cp.dir }

// path returns the path of a file in the working directory.
func (cp *ControlPlane) path(name string) string { return filepath.Join(cp.dir, name) }

// Processes lists the running components with their pids and ports.
func (cp *ControlPlane) Processes() []ProcessInfo {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make([]ProcessInfo, 0, len(cp.procs))
	for _, p := range cp.procs {
		out = append(out, ProcessInfo{Name: p.name, PID: p.pid(), Ports: p.ports})
	}
	return out
}

// LogTails returns the last lines of every component's log, for a test that
// failed for a reason the components may explain.
func (cp *ControlPlane) LogTails(lines int) string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out string
	for _, p := range cp.procs {
		out += fmt.Sprintf("--- %s (%s) ---\n%s\n", p.name, p.logPath, p.tail(lines))
	}
	return out
}

// StopOnSignal stops the control plane and exits with status 130 when the
// process receives SIGINT or SIGTERM, so an interrupted test run leaves
// nothing behind. The returned function stops listening.
func (cp *ControlPlane) StopOnSignal() (cancel func()) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-signals:
			fmt.Fprintf(os.Stderr, "controlplane: %v received, stopping\n", sig)
			_ = cp.Stop()
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(signals)
		close(done)
	}
}

// Stop stops every component, newest first, and removes the working
// directory if Start created it. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		close(cp.stopping)
		cp.mu.Lock()
		procs := cp.procs
		cp.mu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop(15 * time.Second)
		}
		if cp.removeDir && cp.dir != "" {
			cp.stopErr = os.RemoveAll(cp.dir)
		}
	})
	return cp.stopErr
}

func (cp *ControlPlane) writeCertificates() error {
	var err error
	if cp.ca, err = newAuthority("node-manager-local-ca"); err != nil {
		return err
	}
	if cp.frontProxy, err = newAuthority("node-manager-local-front-proxy-ca"); err != nil {
		return err
	}
	serving, err := cp.ca.servingCert("kube-apiserver",
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", APIServerDNSName},
		[]net.IP{net.IPv4(10, 96, 0, 1)})
	if err != nil {
		return err
	}
	if cp.admin, err = cp.ca.clientCert(AdminUser, "system:masters"); err != nil {
		return err
	}
	if cp.kcmClient, err = cp.ca.clientCert("system:kube-controller-manager"); err != nil {
		return err
	}
	kcmServing, err := cp.ca.servingCert("kube-controller-manager", nil, nil)
	if err != nil {
		return err
	}
	proxyClient, err := cp.frontProxy.clientCert(FrontProxyClientName)
	if err != nil {
		return err
	}
	saKey, saPub, err := serviceAccountKey()
	if err != nil {
		return err
	}
	if err := writeFiles(cp.dir, map[string][]byte{
		"ca.crt": cp.ca.certPEM, "ca.key": cp.ca.keyPEM,
		"front-proxy-ca.crt": cp.frontProxy.certPEM,
		"apiserver.crt":      serving.CertPEM, "apiserver.key": serving.KeyPEM,
		"front-proxy-client.crt": proxyClient.CertPEM, "front-proxy-client.key": proxyClient.KeyPEM,
		"kcm.crt": kcmServing.CertPEM, "kcm.key": kcmServing.KeyPEM,
		"sa.key": saKey, "sa.pub": saPub,
	}); err != nil {
		return err
	}
	if err := cp.writeAuthorizationConfig(); err != nil {
		return err
	}
	return cp.writeAdmissionConfig()
}

func (cp *ControlPlane) startEtcd(ctx context.Context, binDir string) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	cp.logf("starting etcd on %s", client)
	p, err := startProcess("etcd", filepath.Join(binDir, "etcd"), []string{
		"--name=local",
		"--data-dir=" + cp.path("etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=local=" + peer,
		// A throw-away cluster: durability is not worth the fsync latency.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}, nil, cp.dir, ports...)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	plain := &http.Client{Timeout: 2 * time.Second}
	return cp.waitHealthy(ctx, p, plain, client+"/health", `"health":"true"`)
}

// EtcdURL is etcd's client URL (plain HTTP on loopback), for a test that
// must see what kube-apiserver stored.
func (cp *ControlPlane) EtcdURL() string { return cp.etcdURL() }

func (cp *ControlPlane) etcdURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(cp.procs[0].ports[0])
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, binDir string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	cp.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	cp.logf("starting kube-apiserver on %s", cp.APIServerURL)
	p, err := startProcess("kube-apiserver", filepath.Join(binDir, "kube-apiserver"), []string{
		"--etcd-servers=" + cp.etcdURL(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + cp.path("apiserver-certs"),
		"--tls-cert-file=" + cp.path("apiserver.crt"),
		"--tls-private-key-file=" + cp.path("apiserver.key"),
		"--client-ca-file=" + cp.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + cp.path("sa.pub"),
		"--service-account-signing-key-file=" + cp.path("sa.key"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		// Node, node-manager's read narrowing, RBAC: the shipped
		// manifests/control-plane/authorization-config.yaml.
		"--authorization-config=" + cp.path("authorization-config.yaml"),
		// Nodes may only write their own Node object, as in a real cluster;
		// ValidatingAdmissionPolicy (on by default since 1.30, named so
		// that the manifests' policies are enforced whatever the default)
		// narrows node-manager's identities beyond RBAC.
		"--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy",
		// Admission webhooks are called with a client certificate (see
		// writeAdmissionConfig).
		"--admission-control-config-file=" + cp.path("admission-config.yaml"),
		"--enable-bootstrap-token-auth=true",
		"--allow-privileged=true",
		// Aggregation layer: the aggregator authenticates to extension
		// servers with the front-proxy client certificate and passes the
		// user in these headers.
		"--requestheader-client-ca-file=" + cp.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + cp.path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + cp.path("front-proxy-client.key"),
		// The apiserver's own address is loopback, which Endpoints and
		// EndpointSlices reject; nothing may reconcile default/kubernetes
		// from it. Suites that need that EndpointSlice write it themselves.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=1",
	}, nil, cp.dir, ports...)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	admin, err := cp.adminHTTPClient()
	if err != nil {
		return err
	}
	return cp.waitHealthy(ctx, p, admin, cp.APIServerURL+"/readyz", "ok")
}

func (cp *ControlPlane) startControllerManager(ctx context.Context, binDir string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	kubeconfig := cp.path("kube-controller-manager.kubeconfig")
	if err := cp.writeClientKubeconfig(kubeconfig, "system:kube-controller-manager", cp.kcmClient); err != nil {
		return err
	}
	cp.logf("starting kube-controller-manager on port %d", ports[0])
	p, err := startProcess("kube-controller-manager", filepath.Join(binDir, "kube-controller-manager"), []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--tls-cert-file=" + cp.path("kcm.crt"),
		"--tls-private-key-file=" + cp.path("kcm.key"),
		"--client-ca-file=" + cp.path("ca.crt"),
		// Every default controller plus the two bootstrap-token ones, which
		// are off by default.
		"--controllers=*,bootstrap-signer-controller,token-cleaner-controller",
		"--cluster-signing-cert-file=" + cp.path("ca.crt"),
		"--cluster-signing-key-file=" + cp.path("ca.key"),
		"--root-ca-file=" + cp.path("ca.crt"),
		"--service-account-private-key-file=" + cp.path("sa.key"),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--leader-elect=false",
		"--v=1",
	}, nil, cp.dir, ports...)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.ca.certPEM)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return cp.waitHealthy(ctx, p, client, "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", "ok")
}

// waitControllersWorking waits for objects only running controllers create:
// the kube-root-ca.crt ConfigMap (root CA publisher) and the default
// ServiceAccount (service account controller). A healthy port alone does
// not prove the controllers have started.
func (cp *ControlPlane) waitControllersWorking(ctx context.Context) error {
	cp.logf("waiting for the controllers to publish kube-root-ca.crt and the default service account")
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	kcm := cp.procs[len(cp.procs)-1]
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if done, werr := kcm.exited(); done {
			return false, fmt.Errorf("exited: %v", werr)
		}
		if _, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, deckhousev1.RootCAConfigMap, metav1.GetOptions{}); err != nil {
			return false, ignoreNotFound(err)
		}
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	})
	if err != nil {
		return kcm.failure(fmt.Errorf("controllers did not become ready: %w", err))
	}
	return nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// waitHealthy polls url until its body contains want, failing early (with
// the log tail) when the process exits.
func (cp *ControlPlane) waitHealthy(ctx context.Context, p *process, client *http.Client, url, want string) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if done, werr := p.exited(); done {
			return false, fmt.Errorf("exited before it was ready: %v", werr)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(want)) {
			return true, nil
		}
		last = fmt.Errorf("GET %s: %s: %s", url, resp.Status, firstLine(body))
		return false, nil
	})
	if err != nil {
		if last != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			err = fmt.Errorf("%w (last check: %v)", err, last)
		}
		return p.failure(fmt.Errorf("not healthy at %s: %w", url, err))
	}
	return nil
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// They are taken below the kernel's ephemeral range, which it gives every
// outgoing connection its local port from: a port from that range
// (listening on :0) was free when checked and could be an outgoing
// connection's by the time a component bound it (a fencing agent failed so
// with "address already in use" while two other suites ran). Below it,
// only another listener can take it in between.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	low, high := listenPortRange()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if high > low && tries < 200*n {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(low+rand.IntN(high-low)))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // in use: another one
			}
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenPortRange is where freePorts looks: from 10000 up to the start of
// the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), or an
// empty range when that cannot be read or leaves too little room.
func listenPortRange() (low, high int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var start, end int
	if _, err := fmt.Sscan(string(b), &start, &end); err != nil || start < 10000+1000 {
		return 0, 0
	}
	return 10000, start
}

// adminHTTPClient is an HTTP client authenticated as the admin, for probes.
func (cp *ControlPlane) adminHTTPClient() (*http.Client, error) {
	rt, err := rest.TransportFor(cp.AdminConfig())
	if err != nil {
		return nil, fmt.Errorf("admin transport: %w", err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: rt}, nil
}
