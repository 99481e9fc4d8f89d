// Package foundation is the e2e suite of the foundation: the local control
// plane itself, node-manager's CRDs (validation, defaults, printer columns)
// and the generated clients, all against a real kube-apiserver.
package foundation

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// The suite shares one control plane; tests that need their own start it.
var (
	cp       *controlplane.ControlPlane
	kube     kubernetes.Interface
	nm       versioned.Interface
	dyn      dynamic.Interface
	repoRoot string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	var err error
	if repoRoot, err = controlplane.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err = controlplane.Start(ctx, controlplane.Config{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	procs := cp.Processes()
	dir := cp.Dir()
	code := func() int {
		defer cp.StopOnSignal()()
		defer func() { _ = cp.Stop() }()
		applier, err := cp.NewApplier()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := applier.ApplyFiles(ctx, filepath.Join(repoRoot, "manifests", "crds")); err != nil {
			fmt.Fprintf(os.Stderr, "install CRDs: %v\n", err)
			return 1
		}
		cfg := cp.AdminConfig()
		kube = kubernetes.NewForConfigOrDie(cfg)
		nm = versioned.NewForConfigOrDie(cfg)
		dyn = dynamic.NewForConfigOrDie(cfg)
		code := m.Run()
		if code != 0 {
			fmt.Fprintf(os.Stderr, "control plane logs:\n%s", cp.LogTails(30))
		}
		return code
	}()
	if err := cp.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		return 1
	}
	if leaks := leftovers(procs, dir); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "the suite's control plane left things behind: %v\n", leaks)
		return 1
	}
	return code
}
