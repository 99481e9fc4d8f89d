package stack

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// CAPIUser is capi-controller-manager's identity: the RBAC of
// manifests/capi-controller-manager is bound to this ServiceAccount, so a
// run on the local control plane proves those rules.
const CAPIUser = "system:serviceaccount:" + deckhousev1.Namespace + ":" + infrav1alpha1.CAPIControllerManagerName

// ClusterAPIModule is the directory of the pinned sigs.k8s.io/cluster-api
// module (hack/tools/clusterapi), whose core/config holds the CRDs, webhook
// configurations and RBAC of the very manager bin/capi-controller-manager is
// built from. Reading them from there keeps upstream's YAML out of this
// repository and always in step with the binary.
func ClusterAPIModule(root string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api")
	cmd.Dir = filepath.Join(root, "hack", "tools", "clusterapi")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the pinned sigs.k8s.io/cluster-api module (go list in hack/tools/clusterapi): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("the pinned sigs.k8s.io/cluster-api module is not downloaded; run 'make bin/capi-controller-manager'")
	}
	return dir, nil
}

// ClusterAPI is a running capi-controller-manager.
type ClusterAPI struct {
	*controlplane.Process
	// WebhookPort serves its conversion and admission webhooks (TLS, with a
	// serving certificate of the control plane's CA); HealthPort /readyz.
	WebhookPort, HealthPort int
	// Kubeconfig is a kubeconfig file for its identity (CAPIUser) whose
	// credentials are files, not data: what node-manager-controller's
	// --cluster-api-kubeconfig stores in the static-kubeconfig Secret, so
	// the Secret holds no key and Cluster API reaches the Nodes as itself.
	Kubeconfig string
}

// StartClusterAPI installs and starts upstream Cluster API's core manager
// next to the control plane, in the order its webhooks need: its RBAC (from
// manifests/), its CRDs from the pinned module with their conversion
// webhook pointed at the manager on loopback, the manager itself (as
// CAPIUser, webhooks served with a certificate of the control plane's CA),
// and, once it is ready, its mutating and validating webhook
// configurations (applied earlier, every create of a Cluster API object
// would fail while the manager is not serving).
func StartClusterAPI(ctx context.Context, cp *controlplane.ControlPlane, root string, applier *controlplane.Applier) (_ *ClusterAPI, err error) {
	module, err := ClusterAPIModule(root)
	if err != nil {
		return nil, err
	}
	if err := applier.ApplyFiles(ctx, filepath.Join(root, "manifests", infrav1alpha1.CAPIControllerManagerName, "rbac.yaml")); err != nil {
		return nil, fmt.Errorf("applying capi-controller-manager's RBAC: %w", err)
	}
	dir := filepath.Join(cp.Dir(), infrav1alpha1.CAPIControllerManagerName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = controlplane.FreePort(); err != nil {
			return nil, err
		}
	}
	webhookPort, healthPort, diagPort := ports[0], ports[1], ports[2]
	serving, servingKey, err := cp.IssueServingCert(infrav1alpha1.CAPIControllerManagerName, "localhost")
	if err != nil {
		return nil, err
	}
	cert, key, err := cp.IssueClientCert(CAPIUser)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"tls.crt": serving, "tls.key": servingKey, "client.crt": cert, "client.key": key, "ca.crt": cp.CACertPEM()}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fileKubeconfig(cp.AdminConfig().Host, dir)), 0o600); err != nil {
		return nil, err
	}

	base := "https://127.0.0.1:" + strconv.Itoa(webhookPort)
	caBundle := base64.StdEncoding.EncodeToString(cp.CACertPEM())
	crdFiles, err := filepath.Glob(filepath.Join(module, "core", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(crdFiles) == 0 {
		return nil, fmt.Errorf("no Cluster API CRDs under %s/core/config/crd/bases (%v)", module, err)
	}
	crds, err := controlplane.ReadManifests(crdFiles...)
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		// Upstream adds this with kustomize patches; without it v1beta1
		// reads would get v1beta2 data relabelled.
		if err := unstructured.SetNestedMap(crd.Object, map[string]any{
			"strategy": "Webhook",
			"webhook": map[string]any{
				"conversionReviewVersions": []any{"v1"},
				"clientConfig":             map[string]any{"url": base + "/convert", "caBundle": caBundle},
			},
		}, "spec", "conversion"); err != nil {
			return nil, err
		}
	}
	if err := applier.Apply(ctx, crds...); err != nil {
		return nil, fmt.Errorf("installing Cluster API's CRDs: %w", err)
	}

	args := []string{
		"--kubeconfig=" + kubeconfig,
		// No --namespace: v1.14's MachineSet and MachineDeployment controllers
		// then fail with "failed to cast ... informer to SharedIndexInformer"
		// (a namespaced cache's informers), and never scale down.
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-cert-dir=" + dir,
		"--health-addr=127.0.0.1:" + strconv.Itoa(healthPort),
		"--diagnostics-address=127.0.0.1:" + strconv.Itoa(diagPort),
		"--insecure-diagnostics",
		// Leader election needs the in-cluster namespace; one local replica.
		"--leader-elect=false",
		// A fresh install has nothing to migrate.
		"--skip-crd-migration-phases=StorageVersionMigration,CleanupManagedFields",
		"--v=2",
	}
	proc, err := cp.StartProcess(infrav1alpha1.CAPIControllerManagerName, filepath.Join(root, "bin", infrav1alpha1.CAPIControllerManagerName), args, ports...)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			proc.Stop()
		}
	}()
	c := &ClusterAPI{Process: proc, WebhookPort: webhookPort, HealthPort: healthPort, Kubeconfig: kubeconfig}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}

	hooks, err := controlplane.ReadManifests(filepath.Join(module, "core", "config", "webhook", "manifests.yaml"))
	if err != nil {
		return nil, err
	}
	for _, h := range hooks {
		h.SetName(infrav1alpha1.CAPIControllerManagerName + "-" + h.GetName())
		list, _, err := unstructured.NestedSlice(h.Object, "webhooks")
		if err != nil {
			return nil, err
		}
		for i, w := range list {
			wm, ok := w.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("webhook configuration %s: unexpected webhook %T", h.GetName(), w)
			}
			path, _, _ := unstructured.NestedString(wm, "clientConfig", "service", "path")
			wm["clientConfig"] = map[string]any{"url": base + path, "caBundle": caBundle}
			list[i] = wm
		}
		if err := unstructured.SetNestedSlice(h.Object, list, "webhooks"); err != nil {
			return nil, err
		}
	}
	if err := applier.Apply(ctx, hooks...); err != nil {
		return nil, fmt.Errorf("applying Cluster API's webhook configurations: %w", err)
	}
	return c, nil
}

// fileKubeconfig names the API and the credentials in dir by path.
func fileKubeconfig(server, dir string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: capi
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: local
  context: {cluster: local, user: capi}
current-context: local
`, server, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
}

// waitReady waits for /readyz, which includes the webhook server.
func (c *ClusterAPI) waitReady(ctx context.Context) error {
	url := "http://127.0.0.1:" + strconv.Itoa(c.HealthPort) + "/readyz"
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if c.Exited() {
			return false, fmt.Errorf("exited before it was ready")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return c.Failure(fmt.Errorf("capi-controller-manager not ready at %s (last: %s): %w", url, last, err))
	}
	return nil
}
