package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// Environment is a local control plane with node-manager's binaries built,
// its CRDs installed and the namespaces, RBAC and admission policies of
// bashible-apiserver, node-manager-controller, fencing-agent and
// caps-controller-manager applied:
// the starting point of the e2e suites and the benchmark.
type Environment struct {
	CP      *controlplane.ControlPlane
	Root    string
	Applier *controlplane.Applier
}

// NewEnvironment starts it from the binaries in <repo>/bin, which the
// caller builds first (BuildBinaries): a build is bounded by go build, not
// by ctx. On error nothing is left running.
func NewEnvironment(ctx context.Context) (_ *Environment, err error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
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
	if err := InstallAPIServer(ctx, root, applier); err != nil {
		return nil, err
	}
	if err := InstallController(ctx, root, applier); err != nil {
		return nil, err
	}
	if err := InstallFencingAgent(ctx, root, applier); err != nil {
		return nil, err
	}
	// caps-controller-manager's identity and the namespace d8-ssh-credentials:
	// every namespace of the manifests exists, as in an installed cluster.
	if err := InstallCAPS(ctx, root, applier); err != nil {
		return nil, err
	}
	if err := InstallPolicies(ctx, root, applier); err != nil {
		return nil, err
	}
	return &Environment{CP: cp, Root: root, Applier: applier}, nil
}

// StartRegistered starts a bashible-apiserver replica, registers it with
// the aggregator and waits until every NodeGroup has been published (or
// reports that it failed to render): a replica is ready as soon as it
// serves what is published, which on a fresh cluster is nothing until the
// leader's first renders land.
func (e *Environment) StartRegistered(ctx context.Context, opts APIServerOptions) (*APIServer, error) {
	s, err := StartRegistered(ctx, e.CP, opts)
	if err != nil {
		return nil, err
	}
	if err := e.WaitPublished(ctx); err != nil {
		s.Stop()
		return nil, s.Failure(err)
	}
	return s, nil
}

// StartRegistered starts a bashible-apiserver replica on cp and registers
// it: the CRDs' conversion webhooks are pointed at it before it starts (as
// the conversion Service of an installation routes to replicas not ready
// yet: loading objects stored at an older version needs the webhook, and a
// replica is ready only once they have loaded), the APIService once it is
// ready.
func StartRegistered(ctx context.Context, cp *controlplane.ControlPlane, opts APIServerOptions) (*APIServer, error) {
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	if err := RegisterConversionAt(ctx, cp, port); err != nil {
		return nil, err
	}
	s, err := startOnPort(ctx, cp, opts, port)
	if err != nil {
		return nil, err
	}
	if err := s.Register(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// WaitPublished waits until each NodeGroup is served or has Rendered=False.
func (e *Environment) WaitPublished(ctx context.Context) error {
	return waitPublished(ctx, versioned.NewForConfigOrDie(e.CP.AdminConfig()))
}

// waitPublished waits until each NodeGroup is served or has Rendered=False.
func waitPublished(ctx context.Context, nm versioned.Interface) error {
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		ngs, err := nm.DeckhouseV1().NodeGroups().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		list, err := nm.BashibleV1alpha1().NodeGroupBundles().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		served := map[string]bool{}
		for _, b := range list.Items {
			served[b.Name] = true
		}
		missing = nil
		for _, ng := range ngs.Items {
			failed := meta.IsStatusConditionFalse(ng.Status.Conditions, bundles.ConditionRendered)
			if !served[ng.Name] && !failed {
				missing = append(missing, ng.Name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("node groups %v were not published: %w", missing, err)
	}
	return nil
}
