// Command localstack is what `make run` runs: it starts the local control
// plane, installs node-manager's CRDs and the example objects, starts
// bashible-apiserver and registers it with the aggregator, writes an admin
// kubeconfig to .local/kubeconfig, shows the node groups and their rendered
// bundles, and keeps everything running until Ctrl-C. The kubeconfig exists
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
	if err := stack.InstallBashibleAPIServer(ctx, root, applier); err != nil {
		return err
	}
	bashible, err := stack.StartBashibleAPIServer(ctx, cp, stack.BashibleOptions{BinDir: filepath.Join(root, "bin")})
	if err != nil {
		return err
	}
	if err := bashible.Register(ctx); err != nil {
		return err
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
	for _, args := range [][]string{{"get", "nodegroups"}, {"get", "nodegroupbundles"}} {
		fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
		show := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", *kubeconfig}, args...)...)
		show.Stdout, show.Stderr = os.Stdout, os.Stderr
		if err := show.Run(); err != nil {
			return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
		}
		fmt.Println()
	}
	fmt.Printf("Try: %s get nodegroupbundles worker -o yaml\n", kubectl)
	fmt.Printf("\nLogs are in %s. Press Ctrl-C to stop.\n", cp.Dir())

	select {
	case <-ctx.Done():
		return nil
	case err := <-cp.Failed():
		return errors.Join(errors.New("the control plane failed"), err)
	}
}
