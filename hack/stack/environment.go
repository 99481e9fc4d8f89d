package stack

import (
	"context"
	"path/filepath"

	"github.com/node-manager/node-manager/hack/controlplane"
)

// Environment is a local control plane with node-manager's binaries built,
// its CRDs installed and the namespaces, RBAC and admission policies of
// bashible-apiserver and node-manager-controller applied:
// the starting point of the e2e suites and the benchmark.
type Environment struct {
	CP      *controlplane.ControlPlane
	Root    string
	Applier *controlplane.Applier
}

// NewEnvironment builds and starts it. On error nothing is left running.
func NewEnvironment(ctx context.Context) (_ *Environment, err error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := BuildBinaries(root); err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()
	applier, err := cp.NewApplier()
	if err != nil {
		return nil, err
	}
	if err := applier.ApplyFiles(ctx, filepath.Join(root, "manifests", "crds")); err != nil {
		return nil, err
	}
	if err := InstallBashibleAPIServer(ctx, root, applier); err != nil {
		return nil, err
	}
	if err := InstallController(ctx, root, applier); err != nil {
		return nil, err
	}
	if err := InstallPolicies(ctx, root, applier); err != nil {
		return nil, err
	}
	return &Environment{CP: cp, Root: root, Applier: applier}, nil
}

// StartRegistered starts a bashible-apiserver replica and registers it
// with the aggregator.
func (e *Environment) StartRegistered(ctx context.Context, opts BashibleOptions) (*Bashible, error) {
	b, err := StartBashibleAPIServer(ctx, e.CP, opts)
	if err != nil {
		return nil, err
	}
	if err := b.Register(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}
