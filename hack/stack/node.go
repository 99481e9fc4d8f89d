package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// SimNode is a node simulated honestly: a directory stands in for its root
// file system, it authenticates with a real node client certificate, and
// it runs the real bashible.sh served by the API (docs/development/
// architecture.md, "Proving it on a local control plane").
type SimNode struct {
	Name, Group string
	// Root is the node's "/".
	Root string
	// Endpoint is the host:port bashible uses to reach the API.
	Endpoint string
	// Env is added to every run's environment.
	Env []string
}

// NewSimNode creates a Node and an Instance for name in group, and a root
// directory holding the cluster CA and the node's kubelet client
// certificate, as a joined machine would.
func NewSimNode(ctx context.Context, cp *controlplane.ControlPlane, dir, name, group string) (*SimNode, error) {
	root := filepath.Join(dir, name)
	n := &SimNode{Name: name, Group: group, Root: root, Endpoint: strings.TrimPrefix(cp.APIServerURL, "https://")}
	for _, d := range []string{"var/lib/bashible", "var/lib/kubelet/pki", "etc", "proc/sys/kernel/random", "control"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	creds, err := cp.NodeCredentials(name)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"var/lib/bashible/ca.crt":                        cp.CACertPEM(),
		"var/lib/kubelet/pki/kubelet-client-current.pem": append(append([]byte{}, creds.CertPEM...), creds.KeyPEM...),
		"etc/os-release":                                 []byte("ID=debian\nVERSION_ID=\"12\"\n"),
		"proc/sys/kernel/random/boot_id":                 []byte("00000000-0000-4000-8000-000000000001\n"),
	}
	for path, data := range files {
		if err := os.WriteFile(filepath.Join(root, path), data, 0o600); err != nil {
			return nil, err
		}
	}
	admin := cp.AdminConfig()
	labels := map[string]string{deckhousev1.NodeGroupLabel: group}
	// As at a real join: node-manager creates the Instance (when it approves
	// the kubelet's certificate) before the Node registers.
	if _, err := versioned.NewForConfigOrDie(admin).DeckhouseV1alpha1().Instances().Create(ctx,
		&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create Instance %s: %w", name, err)
	}
	if _, err := kubernetes.NewForConfigOrDie(admin).CoreV1().Nodes().Create(ctx,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create Node %s: %w", name, err)
	}
	return n, nil
}

// Path is a path inside the node's root.
func (n *SimNode) Path(p string) string { return filepath.Join(n.Root, p) }

// Exists reports whether a file exists inside the node's root.
func (n *SimNode) Exists(p string) bool {
	_, err := os.Stat(n.Path(p))
	return err == nil
}

// Read returns a file inside the node's root, "" if it does not exist.
func (n *SimNode) Read(p string) string {
	data, _ := os.ReadFile(n.Path(p))
	return string(data)
}

// Write writes a file inside the node's root.
func (n *SimNode) Write(p, content string) error {
	if err := os.MkdirAll(filepath.Dir(n.Path(p)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(n.Path(p), []byte(content), 0o644)
}

// Control switches a behaviour of the test steps on (a file under
// /control) or off.
func (n *SimNode) Control(name string, on bool) error {
	if on {
		return n.Write("control/"+name, "")
	}
	err := os.Remove(n.Path("control/" + name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// FetchAgent installs bashible.sh from bashibles/<group> with the node's
// credentials and marks the first run, as the bootstrap script does.
func (n *SimNode) FetchAgent(ctx context.Context, cp *controlplane.ControlPlane) error {
	cfg, err := cp.NodeConfig(n.Name)
	if err != nil {
		return err
	}
	// The Instance was created a moment ago (NewSimNode); bashible-apiserver
	// learns of it through its watch, which a CRD change (the conversion
	// webhook pointed at a new replica) restarts. As bootstrap.sh does on a
	// joining node, the fetch is retried while the node has no Instance yet
	// there, and only then.
	var b *bashiblev1alpha1.Bashible
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, last = versioned.NewForConfigOrDie(cfg).BashibleV1alpha1().Bashibles().Get(ctx, n.Group, metav1.GetOptions{})
		if apierrors.IsForbidden(last) && strings.Contains(last.Error(), "has no Instance yet") {
			return false, nil
		}
		return true, last
	})
	if err != nil {
		if last != nil && err != last {
			err = fmt.Errorf("%w (the last answer: %v)", err, last)
		}
		return fmt.Errorf("fetch bashible.sh for %s: %w", n.Name, err)
	}
	if err := os.WriteFile(n.Path("var/lib/bashible/bashible.sh"), []byte(b.Data[bashiblev1alpha1.BashibleScriptKey]), 0o755); err != nil {
		return err
	}
	return n.Write("var/lib/bashible/first_run", "")
}

// Run is one bashible run.
type Run struct {
	Output   string
	ExitCode int
	Took     time.Duration
}

// Start starts bashible.sh (as the timer would) and returns its command;
// Wait finishes it.
func (n *SimNode) Start(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, error) {
	bashArgs := []string{n.Path("var/lib/bashible/bashible.sh")}
	if os.Getenv("SIMNODE_TRACE") != "" { // debugging aid: trace bashible.sh
		bashArgs = append([]string{"-x"}, bashArgs...)
	}
	cmd := exec.CommandContext(ctx, "bash", append(bashArgs, args...)...)
	cmd.Env = append(os.Environ(),
		"BASHIBLE_ROOT="+n.Root,
		"BASHIBLE_API_ENDPOINTS="+n.Endpoint,
		"BASHIBLE_NODE_NAME="+n.Name,
		"BASHIBLE_RETRY_DELAY=1",
		"BASHIBLE_POLL_SECONDS=1",
		"BASHIBLE_REBOOT_COMMAND=touch "+n.Path("rebooted"),
	)
	if os.Getenv("SIMNODE_TRACE") != "" {
		cmd.Env = append(cmd.Env, "SHELLOPTS=xtrace") // trace the runs bashible.sh starts too
	}
	cmd.Env = append(cmd.Env, n.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	return cmd, &out, cmd.Start()
}

// RunOnce runs bashible.sh to its end.
func (n *SimNode) RunOnce(ctx context.Context, args ...string) (Run, error) {
	start := time.Now()
	cmd, out, err := n.Start(ctx, args...)
	if err != nil {
		return Run{}, err
	}
	err = cmd.Wait()
	run := Run{Output: out.String(), Took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.ExitCode = exit.ExitCode()
	case err != nil:
		return run, err
	}
	return run, nil
}

// Annotations returns the node's Node annotations.
func (n *SimNode) Annotations(ctx context.Context, cp *controlplane.ControlPlane) (map[string]string, error) {
	node, err := kubernetes.NewForConfigOrDie(cp.AdminConfig()).CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return node.Annotations, nil
}

// Annotate sets (or, with value nil, removes) Node annotations as an administrator.
func (n *SimNode) Annotate(ctx context.Context, cp *controlplane.ControlPlane, annotations map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = kubernetes.NewForConfigOrDie(cp.AdminConfig()).CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
