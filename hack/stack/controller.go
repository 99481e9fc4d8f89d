package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
}

// Controller is a running node-manager-controller.
type Controller struct {
	*controlplane.Process
	Identity string
	// Port serves /metrics, /healthz and /readyz on 127.0.0.1.
	Port int
}

// StartController starts node-manager-controller as its ServiceAccount and
// waits until its informers have synced.
func (e *Environment) StartController(ctx context.Context, opts ControllerOptions) (*Controller, error) {
	if opts.Identity == "" {
		opts.Identity = "controller-1"
	}
	cp := e.CP
	dir := filepath.Join(cp.Dir(), "node-manager-controller-"+opts.Identity)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cert, key, err := cp.IssueClientCert(ControllerUser)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteClientKubeconfig(kubeconfig, ControllerUser, cert, key); err != nil {
		return nil, err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + deckhousev1.Namespace,
		"--identity=" + opts.Identity,
		"--listen-address=127.0.0.1:" + strconv.Itoa(port),
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"--v=2",
	}, opts.ExtraArgs...)
	proc, err := cp.StartProcess("node-manager-controller-"+opts.Identity, filepath.Join(e.Root, "bin", deckhousev1.NodeManagerControllerName), args, port)
	if err != nil {
		return nil, err
	}
	c := &Controller{Process: proc, Identity: opts.Identity, Port: port}
	if err := c.waitReady(ctx); err != nil {
		proc.Stop()
		return nil, err
	}
	return c, nil
}

// URL is the base URL of the metrics and probes endpoint.
func (c *Controller) URL() string { return "http://127.0.0.1:" + strconv.Itoa(c.Port) }

// Get fetches a path of the metrics and probes endpoint.
func (c *Controller) Get(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL()+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
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
		code, body, err := c.Get(ctx, "/readyz")
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
