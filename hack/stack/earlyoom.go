package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// EarlyOOMUser is early-oom's identity, its ServiceAccount: the manifests'
// RBAC and the own-node admission policy apply to it.
const EarlyOOMUser = "system:serviceaccount:" + deckhousev1.Namespace + ":" + deckhousev1.EarlyOOMName

// InstallEarlyOOM applies early-oom's ServiceAccount and RBAC from
// manifests/early-oom (the DaemonSet itself has no kubelet to run it; the
// tests run the agent as a process). Its admission policy comes with
// InstallPolicies.
func InstallEarlyOOM(ctx context.Context, root string, applier *controlplane.Applier) error {
	return applier.ApplyFiles(ctx, filepath.Join(root, "manifests", deckhousev1.EarlyOOMName, "rbac.yaml"))
}

// EarlyOOMOptions configure one early-oom process, the agent of one
// simulated node.
type EarlyOOMOptions struct {
	// Node is the node it guards.
	Node string
	// PodNamespace, PodName and PodUID are its own pod's, bound to Node.
	PodNamespace, PodName, PodUID string
	// Token is its credential: a ServiceAccount token bound to that pod,
	// as the kubelet would project it.
	Token string
	// Dir holds the node files it reads: pressure/memory, meminfo and the
	// cgroup tree cgroup/.
	Dir string
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
}

// EarlyOOM is a running early-oom agent. It serves its probes and metrics
// as node-manager-controller does (serving.Serve), so Controller's
// Get and GetAs apply.
type EarlyOOM struct {
	*Controller
}

// StartEarlyOOM starts the agent with its token and waits until it is
// ready (its caches have synced and it samples).
func (e *Environment) StartEarlyOOM(ctx context.Context, opts EarlyOOMOptions) (*EarlyOOM, error) {
	cp := e.CP
	name := deckhousev1.EarlyOOMName + "-" + opts.Node
	dir := filepath.Join(cp.Dir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: cp.APIServerURL, CertificateAuthorityData: cp.CACertPEM()}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"agent": {Token: opts.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: "agent"}},
		CurrentContext: "local",
	}
	if err := clientcmd.WriteToFile(cfg, kubeconfig); err != nil {
		return nil, fmt.Errorf("write early-oom's kubeconfig: %w", err)
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
		"--node-name=" + opts.Node,
		"--pod-namespace=" + opts.PodNamespace,
		"--pod-name=" + opts.PodName,
		"--pod-uid=" + opts.PodUID,
		"--psi-path=" + filepath.Join(opts.Dir, "pressure", "memory"),
		"--meminfo-path=" + filepath.Join(opts.Dir, "meminfo"),
		"--cgroup-root=" + filepath.Join(opts.Dir, "cgroup"),
		"--listen-address=127.0.0.1:" + strconv.Itoa(port),
		"--v=2",
	}, opts.ExtraArgs...)
	proc, err := cp.StartProcess(name, filepath.Join(e.Root, "bin", deckhousev1.EarlyOOMName), args, port)
	if err != nil {
		return nil, err
	}
	a := &EarlyOOM{Controller: &Controller{Process: proc, Identity: opts.Node, Port: port, admin: admin}}
	if err := a.waitReady(ctx); err != nil {
		proc.Stop()
		return nil, err
	}
	return a, nil
}
