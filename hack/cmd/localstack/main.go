// Command localstack is what `make run` runs: it starts the local control
// plane, installs node-manager's CRDs and the example objects, starts
// bashible-apiserver and registers it with the aggregator, starts
// upstream Cluster API's core manager (bin/capi-controller-manager, as its
// ServiceAccount; hack/stack/clusterapi.go), starts node-manager-controller
// (as its ServiceAccount, with --cluster-api) and caps-controller-manager
// (Cluster API Provider Static, as its ServiceAccount), writes an admin
// kubeconfig to .local/kubeconfig, shows the node groups, their rendered
// bundles and manual-bootstrap Secrets, and keeps everything running until Ctrl-C. The kubeconfig exists
// only while the whole stack is ready; it is removed on exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "localstack: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	binDir := flag.String("bin-dir", filepath.Join(root, "bin"), "directory with etcd, kube-apiserver, kube-controller-manager and kubectl")
	kubeconfig := flag.String("kubeconfig", filepath.Join(root, ".local", "kubeconfig"), "where to write the admin kubeconfig while the stack runs")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cp, err := controlplane.Start(ctx, controlplane.Config{BinDir: *binDir, Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("localstack: stopping")
		_ = os.Remove(*kubeconfig)
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "localstack: stop: %v\n", err)
		}
	}()

	applier, err := cp.NewApplier()
	if err != nil {
		return err
	}
	for _, dir := range []string{"manifests/crds", "manifests/examples"} {
		fmt.Printf("localstack: applying %s\n", dir)
		if err := applier.ApplyFiles(ctx, filepath.Join(root, dir)); err != nil {
			return err
		}
	}
	fmt.Println("localstack: building and starting bashible-apiserver")
	if err := stack.BuildBinaries(root); err != nil {
		return err
	}
	if err := stack.InstallAPIServer(ctx, root, applier); err != nil {
		return err
	}
	apiServer, err := stack.StartAPIServer(ctx, cp, stack.APIServerOptions{BinDir: filepath.Join(root, "bin")})
	if err != nil {
		return err
	}
	if err := apiServer.Register(ctx); err != nil {
		return err
	}
	if err := apiServer.RegisterPreviewWebhook(ctx); err != nil {
		return err
	}
	// Stand-ins for the control-plane addresses a real cluster publishes;
	// they end up in rendered bundles and manual-bootstrap scripts.
	if err := stack.PublishAPIEndpoints(ctx, kubernetes.NewForConfigOrDie(cp.AdminConfig()), "192.0.2.10"); err != nil {
		return err
	}
	fmt.Println("localstack: starting node-manager-controller")
	env := &stack.Environment{CP: cp, Root: root, Applier: applier}
	if err := stack.InstallController(ctx, root, applier); err != nil {
		return err
	}
	// The identity of the fencing agents the controller runs per fenced group.
	if err := stack.InstallFencingAgent(ctx, root, applier); err != nil {
		return err
	}
	if err := stack.InstallPolicies(ctx, root, applier); err != nil {
		return err
	}
	fmt.Println("localstack: starting capi-controller-manager (Cluster API core, pinned in hack/tools/clusterapi)")
	capi, err := stack.StartClusterAPI(ctx, cp, root, applier)
	if err != nil {
		return err
	}
	if _, err := env.StartController(ctx, stack.ControllerOptions{ExtraArgs: []string{
		"--cluster-api", "--cluster-api-kubeconfig=" + capi.Kubeconfig}}); err != nil {
		return err
	}
	// Cluster API Provider Static: StaticInstances joined over SSH.
	fmt.Println("localstack: starting caps-controller-manager (Cluster API Provider Static)")
	if err := stack.InstallCAPS(ctx, root, applier); err != nil {
		return err
	}
	if _, err := env.StartCAPS(ctx, stack.ControllerOptions{}); err != nil {
		return err
	}
	// The controller writes group status and a manual-bootstrap Secret per
	// group; show the stack once it has.
	kube := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ManualBootstrapSecretPrefix+"worker", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("node-manager-controller did not write manual-bootstrap-for-worker: %w", err)
	}

	if err := cp.WriteKubeconfig(*kubeconfig); err != nil {
		return err
	}
	kubectl := filepath.Join(*binDir, "kubectl")
	fmt.Printf(`
node-manager local stack is ready.

  export KUBECONFIG=%s
  %s get nodegroups

`, *kubeconfig, kubectl)
	for _, args := range [][]string{{"get", "nodegroups"}, {"get", "nodegroupbundles"},
		{"-n", deckhousev1.Namespace, "get", "secrets", "-l", deckhousev1.TokenNodeGroupLabel}} {
		fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
		show := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", *kubeconfig}, args...)...)
		show.Stdout, show.Stderr = os.Stdout, os.Stderr
		if err := show.Run(); err != nil {
			return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
		}
		fmt.Println()
	}
	fmt.Printf("Try: %s get nodegroupbundles worker -o yaml\n", kubectl)
	fmt.Printf("     %s -n %s get secret manual-bootstrap-for-worker -o jsonpath='{.data.bootstrap\\.sh}' | base64 -d\n", kubectl, deckhousev1.Namespace)
	fmt.Printf("\nLogs are in %s. Press Ctrl-C to stop.\n", cp.Dir())

	select {
	case <-ctx.Done():
		return nil
	case err := <-cp.Failed():
		return errors.Join(errors.New("the control plane failed"), err)
	}
}
