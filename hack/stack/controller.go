package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// ControllerUser is node-manager-controller's identity: the manifests' RBAC
// is bound to this ServiceAccount, so the e2e runs prove those rules.
const ControllerUser = "system:serviceaccount:" + deckhousev1.Namespace + ":node-manager-controller"

// InstallController applies node-manager-controller's RBAC and the
// bindings of node-manager's TLS bootstrap from manifests/.
func InstallController(ctx context.Context, root string, applier *controlplane.Applier) error {
	dir := filepath.Join(root, "manifests", deckhousev1.NodeManagerControllerName)
	return applier.ApplyFiles(ctx, filepath.Join(dir, "rbac.yaml"), filepath.Join(dir, "node-join.yaml"))
}

// ControllerOptions configure one node-manager-controller process.
type ControllerOptions struct {
	// Identity names the process (log file, Lease holder); default "controller-1".
	Identity string
	// ExtraArgs are appended to the command line (for example shorter
	// drain timings in tests).
	ExtraArgs []string
	// APIServer is host:port the controller reaches kube-apiserver at (a
	// proxy the test can cut); empty means kube-apiserver itself.
	APIServer string
}

// Controller is a running node-manager-controller.
type Controller struct {
	*controlplane.Process
	Identity string
	// Port serves /metrics, /healthz and /readyz on 127.0.0.1, over HTTPS
	// with a self-signed certificate.
	Port int
	// admin is the control plane's admin client certificate, which Get
	// presents.
	admin tls.Certificate
}

// StartController starts node-manager-controller as its ServiceAccount and
// waits until its informers have synced. Certificate management is off
// (the harness gives every process a certificate of the control plane's
// CA and registers it with that CA); a test turns it on with
// --manage-certificates in ExtraArgs, which come later.
func (e *Environment) StartController(ctx context.Context, opts ControllerOptions) (*Controller, error) {
	opts.ExtraArgs = append([]string{"--manage-certificates=false"}, opts.ExtraArgs...)
	return e.startManager(ctx, deckhousev1.NodeManagerControllerName, ControllerUser, opts)
}

// startManager starts a binary built on controllers/manager (its name is
// the binary's, its log's and its directory's) as user, and waits until its
// informers have synced.
func (e *Environment) startManager(ctx context.Context, name, user string, opts ControllerOptions) (*Controller, error) {
	if opts.Identity == "" {
		opts.Identity = "controller-1"
	}
	cp := e.CP
	dir := filepath.Join(cp.Dir(), name+"-"+opts.Identity)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cert, key, err := cp.IssueClientCert(user)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteClientKubeconfig(kubeconfig, user, cert, key); err != nil {
		return nil, err
	}
	if opts.APIServer != "" {
		if err := pointKubeconfigAt(kubeconfig, "https://"+opts.APIServer); err != nil {
			return nil, err
		}
	}
	clientCA, admin, err := metricsClients(cp, dir)
	if err != nil {
		return nil, err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--client-ca-file=" + clientCA,
		"--namespace=" + deckhousev1.Namespace,
		"--identity=" + opts.Identity,
		"--listen-address=127.0.0.1:" + strconv.Itoa(port),
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"--v=2",
	}, opts.ExtraArgs...)
	proc, err := cp.StartProcess(name+"-"+opts.Identity, filepath.Join(e.Root, "bin", name), args, port)
	if err != nil {
		return nil, err
	}
	c := &Controller{Process: proc, Identity: opts.Identity, Port: port, admin: admin}
	if err := c.waitReady(ctx); err != nil {
		proc.Stop()
		return nil, err
	}
	return c, nil
}

// URL is the base URL of the metrics and probes endpoint.
func (c *Controller) URL() string { return "https://127.0.0.1:" + strconv.Itoa(c.Port) }

// Credentials are what a request to the endpoint presents: a client
// certificate, a bearer token, or (zero) nothing.
type Credentials struct {
	Cert  *tls.Certificate
	Token string
}

// Get fetches a path of the metrics and probes endpoint as the control
// plane's admin (system:masters may read /metrics).
func (c *Controller) Get(ctx context.Context, path string) (int, string, error) {
	return c.GetAs(ctx, path, Credentials{Cert: &c.admin})
}

// GetAs fetches a path presenting cred.
func (c *Controller) GetAs(ctx context.Context, path string, cred Credentials) (int, string, error) {
	return getAs(ctx, c.URL()+path, cred)
}

// getAs fetches url presenting cred. The serving certificates of the
// components' metrics endpoints are self-signed, so they are not
// verified: what is under test is the caller's authentication and
// authorization.
func getAs(ctx context.Context, url string, cred Credentials) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if cred.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cred.Token)
	}
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	if cred.Cert != nil {
		cfg.Certificates = []tls.Certificate{*cred.Cert}
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (c *Controller) waitReady(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if c.Exited() {
			return false, fmt.Errorf("exited before it was ready")
		}
		// Without credentials: the probes are open, as the kubelet needs.
		code, body, err := c.GetAs(ctx, "/readyz", Credentials{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d %s", code, body)
		return code == http.StatusOK, nil
	})
	if err != nil {
		return c.Failure(fmt.Errorf("not ready at %s/readyz (last: %s): %w", c.URL(), last, err))
	}
	return nil
}

// Metric is the value of one series of the controller's /metrics, named
// as the text format writes it (name{label="value",...}, labels sorted);
// ok is false while the controller does not export it.
func (c *Controller) Metric(ctx context.Context, series string) (value string, ok bool, err error) {
	code, body, err := c.Get(ctx, "/metrics")
	if err != nil {
		return "", false, err
	}
	if code != http.StatusOK {
		return "", false, fmt.Errorf("GET %s/metrics: %d %s", c.URL(), code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, found := strings.CutPrefix(line, series+" "); found {
			return v, true, nil
		}
	}
	return "", false, nil
}

// metricsClients lets the control plane's admin read a component's
// /metrics, which accepts the control plane's client certificates as well
// as tokens: it writes the cluster CA into dir for the component's
// --client-ca-file and returns that file and the admin's certificate.
func metricsClients(cp *controlplane.ControlPlane, dir string) (string, tls.Certificate, error) {
	clientCA := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(clientCA, cp.CACertPEM(), 0o600); err != nil {
		return "", tls.Certificate{}, err
	}
	admin, err := tls.X509KeyPair(cp.AdminConfig().CertData, cp.AdminConfig().KeyData)
	if err != nil {
		return "", tls.Certificate{}, fmt.Errorf("reading the admin client certificate: %w", err)
	}
	return clientCA, admin, nil
}
