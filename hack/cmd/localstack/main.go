// Command localstack is what `make run` runs: it starts the local control
// plane, installs node-manager's CRDs and the example objects, writes an
// admin kubeconfig to .local/kubeconfig, shows the example node groups, and
// keeps everything running until Ctrl-C. The kubeconfig exists only while
// the whole stack is ready; it is removed on exit.
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
	"syscall"

	"github.com/node-manager/node-manager/hack/controlplane"
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

	if err := cp.WriteKubeconfig(*kubeconfig); err != nil {
		return err
	}
	kubectl := filepath.Join(*binDir, "kubectl")
	fmt.Printf(`
node-manager local stack is ready.

  export KUBECONFIG=%s
  %s get nodegroups

`, *kubeconfig, kubectl)
	show := exec.CommandContext(ctx, kubectl, "--kubeconfig", *kubeconfig, "get", "nodegroups")
	show.Stdout, show.Stderr = os.Stdout, os.Stderr
	if err := show.Run(); err != nil {
		return fmt.Errorf("kubectl get nodegroups: %w", err)
	}
	fmt.Printf("\nLogs are in %s. Press Ctrl-C to stop.\n", cp.Dir())

	select {
	case <-ctx.Done():
		return nil
	case err := <-cp.Failed():
		return errors.Join(errors.New("the control plane failed"), err)
	}
}
