// Package stack runs node-manager's own components next to a local control
// plane (hack/controlplane): it builds them, installs their manifests,
// starts them as processes and registers bashible-apiserver with the
// aggregator. `make run` and the e2e suites share it.
package stack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// Fixed names (docs/development/architecture.md, "Fixed names").
const (
	// ServiceAccountUser is bashible-apiserver's identity; the manifests'
	// RBAC is bound to this ServiceAccount, and a client certificate with
	// this name gets exactly those permissions.
	ServiceAccountUser = "system:serviceaccount:" + deckhousev1.Namespace + ":bashible-apiserver"
	// BundlesNamespace is where bashible-apiserver publishes bundles and
	// holds its Lease: a namespace only it may write to.
	BundlesNamespace = deckhousev1.BundlesNamespace
)

// PrebuiltEnv names the environment variable with which make test-e2e
// tells the suites it has just built the stack's binaries into the bin
// directory it holds: a suite's go build would find them up to date, at
// about two CPU-seconds of hashing sources each (seventeen suites).
const PrebuiltEnv = "NODE_MANAGER_E2E_PREBUILT"

// Build is BuildBinaries in the repository this process runs in, unless
// make has just built them there (PrebuiltEnv).
func Build() error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	if os.Getenv(PrebuiltEnv) == filepath.Join(root, "bin") {
		return nil
	}
	return BuildBinaries(root)
}

// BuildBinaries builds node-manager's binaries into <root>/bin (the
// Makefile's STACK_CMDS).
func BuildBinaries(root string) error {
	cmd := exec.Command("go", "build", "-o", filepath.Join(root, "bin")+"/",
		"./apiserver/cmd/bashible-apiserver", "./apiserver/cmd/"+deckhousev1.BashibleRenderWorkerName, "./controllers/cmd/node-manager-controller", "./controllers/cmd/caps-controller-manager",
		"./agents/cmd/fencing-agent", "./agents/cmd/early-oom")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build bashible-apiserver (and its render worker), node-manager-controller, caps-controller-manager, fencing-agent and early-oom: %w\n%s", err, out)
	}
	return nil
}

// InstallAPIServer applies bashible-apiserver's namespaces and RBAC
// from manifests/ (the real ones, so the e2e runs prove them).
func InstallAPIServer(ctx context.Context, root string, applier *controlplane.Applier) error {
	dir := filepath.Join(root, "manifests", deckhousev1.BashibleAPIServerName)
	return applier.ApplyFiles(ctx, filepath.Join(dir, "namespace.yaml"), filepath.Join(dir, "rbac.yaml"))
}

// InstallPolicies applies the ValidatingAdmissionPolicies of
// manifests/policies, which narrow what node-manager's identities may write.
// kube-apiserver enforces a new policy within about a second.
func InstallPolicies(ctx context.Context, root string, applier *controlplane.Applier) error {
	return applier.ApplyFiles(ctx, filepath.Join(root, "manifests", "policies"))
}

// APIServerOptions configure one bashible-apiserver replica.
type APIServerOptions struct {
	// BinDir holds bashible-apiserver; empty means <root>/bin.
	BinDir string
	// Identity names the replica (log file, Lease holder); default "replica-1".
	Identity string
	// TemplatesDir is layered over the built-in tree when set.
	TemplatesDir string
	// APIServer is host:port the replica reaches kube-apiserver at (a
	// proxy the test can cut); empty means kube-apiserver itself.
	APIServer string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
	// Env (NAME=VALUE) is added to the replica's environment.
	Env []string
	// CertDir, when set, holds the tls.crt and tls.key the replica serves
	// (kept there by the test, as the kubelet keeps a Secret volume)
	// instead of a certificate of the control plane's CA; the readiness
	// check then does not verify the certificate.
	CertDir string
}

// APIServer is a running bashible-apiserver replica.
type APIServer struct {
	*controlplane.Process
	// Port is its secure port on 127.0.0.1.
	Port     int
	Identity string
	opts     APIServerOptions
	cp       *controlplane.ControlPlane
}

// StartAPIServer starts a replica authenticated as the
// bashible-apiserver ServiceAccount and waits until it reports ready.
func StartAPIServer(ctx context.Context, cp *controlplane.ControlPlane, opts APIServerOptions) (*APIServer, error) {
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	return startOnPort(ctx, cp, opts, port)
}

func startOnPort(ctx context.Context, cp *controlplane.ControlPlane, opts APIServerOptions, port int) (*APIServer, error) {
	if opts.Identity == "" {
		opts.Identity = "replica-1"
	}
	if opts.BinDir == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			return nil, err
		}
		opts.BinDir = filepath.Join(root, "bin")
	}
	dir := filepath.Join(cp.Dir(), "bashible-apiserver-"+opts.Identity)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := cp.IssueServingCert(bashiblev1alpha1.ServiceName, bashiblev1alpha1.ServiceName+"."+deckhousev1.Namespace+".svc",
		bashiblev1alpha1.ConversionServiceName+"."+deckhousev1.Namespace+".svc")
	if err != nil {
		return nil, err
	}
	clientCert, clientKey, err := cp.IssueClientCert(ServiceAccountUser)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteClientKubeconfig(kubeconfig, ServiceAccountUser, clientCert, clientKey); err != nil {
		return nil, err
	}
	if opts.APIServer != "" {
		if err := pointKubeconfigAt(kubeconfig, "https://"+opts.APIServer); err != nil {
			return nil, err
		}
	}
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	certDir := dir
	if opts.CertDir != "" {
		certDir = opts.CertDir
	}
	args := []string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + filepath.Join(certDir, "tls.crt"),
		"--tls-private-key-file=" + filepath.Join(certDir, "tls.key"),
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bundles-namespace=" + BundlesNamespace,
		"--identity=" + opts.Identity,
		"--v=2",
	}
	if opts.TemplatesDir != "" {
		args = append(args, "--templates-dir="+opts.TemplatesDir)
	}
	args = append(args, opts.ExtraArgs...)
	proc, err := cp.StartProcessWithEnv("bashible-apiserver-"+opts.Identity, filepath.Join(opts.BinDir, deckhousev1.BashibleAPIServerName), args, opts.Env, port)
	if err != nil {
		return nil, err
	}
	s := &APIServer{Process: proc, Port: port, Identity: opts.Identity, opts: opts, cp: cp}
	if err := s.waitReady(ctx); err != nil {
		proc.Stop()
		return nil, err
	}
	return s, nil
}

// Restart stops the replica and starts it again on the same port.
func (s *APIServer) Restart(ctx context.Context) (*APIServer, error) {
	return s.RestartWith(ctx, s.opts)
}

// RestartWith stops the replica and starts it again on the same port with
// opts (its identity and binaries unless opts names others), as a rolling
// upgrade replaces a pod with one of the next version.
func (s *APIServer) RestartWith(ctx context.Context, opts APIServerOptions) (*APIServer, error) {
	if opts.Identity == "" {
		opts.Identity = s.opts.Identity
	}
	if opts.BinDir == "" {
		opts.BinDir = s.opts.BinDir
	}
	s.Stop()
	next, err := startOnPort(ctx, s.cp, opts, s.Port)
	if err != nil {
		return nil, err
	}
	// The aggregator may have probed the APIService while the replica was
	// down and marked it unavailable; until it probes again it answers 503
	// for the whole group. A restarted replica counts as back once the
	// aggregator serves through it again.
	if err := waitServedThroughAggregator(ctx, s.cp, s.Port); err != nil {
		next.Stop()
		return nil, err
	}
	return next, nil
}

// waitServedThroughAggregator waits, when the APIService points at port,
// until it is Available and kube-apiserver answers the group's discovery
// through it. An APIService pointing elsewhere (a Service in front of
// several replicas, or none registered) is not this replica's to wait for.
func waitServedThroughAggregator(ctx context.Context, cp *controlplane.ControlPlane, port int) error {
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	obj, err := dyn.Resource(gvr).Get(ctx, bashiblev1alpha1.APIServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read APIService %s: %w", bashiblev1alpha1.APIServiceName, err)
	}
	if p, _, _ := unstructured.NestedInt64(obj.Object, "spec", "service", "port"); p != int64(port) {
		return nil
	}
	if err := waitAvailable(ctx, dyn); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		last = kube.Discovery().RESTClient().Get().AbsPath("/apis/bashible.deckhouse.io/v1alpha1").Do(ctx).Error()
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver does not serve bashible.deckhouse.io/v1alpha1 through the restarted replica on port %d (last: %v): %w", port, last, err)
	}
	return nil
}

// Get fetches a path from the replica itself, bypassing the aggregator,
// as the control plane's admin (whom the replica authorizes through
// kube-apiserver).
func (s *APIServer) Get(ctx context.Context, path string) (int, string, error) {
	admin, err := tls.X509KeyPair(s.cp.AdminConfig().CertData, s.cp.AdminConfig().KeyData)
	if err != nil {
		return 0, "", fmt.Errorf("reading the admin client certificate: %w", err)
	}
	return getAs(ctx, s.URL()+path, Credentials{Cert: &admin})
}

// URL is the replica's base URL.
func (s *APIServer) URL() string { return "https://127.0.0.1:" + strconv.Itoa(s.Port) }

func (s *APIServer) waitReady(ctx context.Context) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.cp.CACertPEM())
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if s.opts.CertDir != "" {
		// A certificate of another CA, which the test checks itself.
		cfg = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // see above
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if s.Exited() {
			return false, fmt.Errorf("exited before it was ready")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/readyz?verbose", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode == http.StatusOK {
			return true, nil
		}
		last = resp.Status
		return false, nil
	})
	if err != nil {
		return s.Failure(fmt.Errorf("not ready at %s/readyz (last: %s): %w", s.URL(), last, err))
	}
	return nil
}

// Register points the aggregator at s: Service bashible-api as an
// ExternalName for localhost (Endpoints cannot hold loopback addresses) and
// APIService v1alpha1.bashible.deckhouse.io on s's port, trusting the
// cluster CA; and the CRDs' conversion webhooks (RegisterConversionAt).
// It waits until the APIService is Available.
func (s *APIServer) Register(ctx context.Context) error { return RegisterAt(ctx, s.cp, s.Port) }

// pointKubeconfigAt makes every cluster of the kubeconfig at path use
// server instead.
func pointKubeconfigAt(path, server string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return fmt.Errorf("read kubeconfig %s: %w", path, err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// RegisterAt is Register for whatever listens on port: a replica, or a
// Service in front of several (framework.Service).
func RegisterAt(ctx context.Context, cp *controlplane.ControlPlane, port int) error {
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	if err := RegisterConversionAt(ctx, cp, port); err != nil {
		return err
	}
	svc := localService(bashiblev1alpha1.ServiceName)
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": bashiblev1alpha1.APIServiceName},
		"spec": map[string]any{
			"group": "bashible.deckhouse.io", "version": "v1alpha1",
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service":  map[string]any{"name": bashiblev1alpha1.ServiceName, "namespace": deckhousev1.Namespace, "port": int64(port)},
			"caBundle": cp.CACertPEM(),
		},
	}}
	applier, err := cp.NewApplier()
	if err != nil {
		return err
	}
	if err := applier.Apply(ctx, svc, apiService); err != nil {
		return err
	}
	return waitAvailable(ctx, dyn)
}

// RegisterConversionAt points the CRDs' conversion webhooks at whatever
// listens on port: Service bashible-api-conversion as an ExternalName for
// localhost, and the CRDs (PointConversionWebhooks). StartRegistered calls
// it before the replica starts, as the conversion Service of an
// installation routes to replicas not ready yet: a replica's informers
// may need the webhook to load, and it is ready only once they have.
func RegisterConversionAt(ctx context.Context, cp *controlplane.ControlPlane, port int) error {
	applier, err := cp.NewApplier()
	if err != nil {
		return err
	}
	if err := applier.Apply(ctx, localService(bashiblev1alpha1.ConversionServiceName)); err != nil {
		return err
	}
	_, err = PointConversionWebhooks(ctx, cp, port)
	return err
}

// localService is Service name (in the namespace of node-manager) as an
// ExternalName for localhost: Endpoints cannot hold loopback addresses.
func localService(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": deckhousev1.Namespace},
		"spec":     map[string]any{"type": "ExternalName", "externalName": "localhost"},
	}}
}

// waitAvailable waits until the APIService's Available condition is True.
func waitAvailable(ctx context.Context, dyn dynamic.Interface) error {
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(gvr).Get(ctx, bashiblev1alpha1.APIServiceName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s did not become Available (%s): %w", bashiblev1alpha1.APIServiceName, last, err)
	}
	return nil
}

// runtimeSettings are the Go runtime's environment variables that
// bashible-apiserver's Deployment may set.
var runtimeSettings = []string{"GOGC", "GOMEMLIMIT"}

// ShippedRuntimeEnv is the GOGC and GOMEMLIMIT bashible-apiserver's
// Deployment (manifests/bashible-apiserver under root) sets, as NAME=VALUE,
// for a replica whose figures should be those of the shipped server
// (APIServerOptions.Env).
func ShippedRuntimeEnv(root string) ([]string, error) {
	path := filepath.Join(root, "manifests", deckhousev1.BashibleAPIServerName, "deployment.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if slices.Contains(runtimeSettings, e.Name) {
					env = append(env, e.Name+"="+e.Value)
				}
			}
		}
	}
	if len(env) == 0 {
		return nil, fmt.Errorf("%s sets neither %v", path, runtimeSettings)
	}
	return env, nil
}
