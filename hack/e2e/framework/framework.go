// Package framework is what the e2e suites under hack/e2e share, the way
// kubernetes' test/e2e/framework serves its suites.
//
// A suite declares its Framework once, var f = framework.New(opts), and
// its TestMain is one line, os.Exit(f.Run(m, setUp)): Run starts a local
// control plane (hack/controlplane) with node-manager's CRDs and, unless
// the suite is bare, node-manager's binaries built and both components'
// manifests applied (hack/stack); it calls the suite's setUp, runs the
// tests, prints the components' log tails when anything failed and stops
// everything. The tests reach the cluster through f and use the helpers
// here instead of writing their own: Context and Poll for
// time, NewGroup/TestGroup, NewNode/TestNode, TestInstance and
// TestConfiguration for objects that live as long as one test,
// TestHeartbeat for a node's Lease renewed as the node's kubelet would, Bundle,
// Checksum and WaitChecksum for what bashible-apiserver serves, TestAgent,
// WatchGroup, Kubelet, NewConfiguration and WaitRolledOut for nodes that
// follow bashible's update protocol and a rollout's invariants,
// NewTCPProxy and StartService for the network between components (a link
// to cut, a Service in front of replicas), Kubectl, EventNotes and ReadFile.
//
// Helpers named Test* create an object for one test: they fail the test
// when the API refuses, and delete the object when the test ends. Set-up
// helpers take a context and return an error instead.
//
// Helpers for shell scripts live in hack/shelltest, which depends on
// nothing here, so that unit tests use them without a control plane.
package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

// setUpTimeout bounds starting the environment and the suite's setUp. The
// context setUp receives lasts until the suite ends but expires this long
// after the start: what must run longer takes a context of its own.
const setUpTimeout = 4 * time.Minute

// Framework is a suite's environment as its tests see it. A suite
// declares one (var f = framework.New(...)) and runs it from TestMain
// (os.Exit(f.Run(m, setUp))); its fields are set once Run has started the
// environment.
type Framework struct {
	// CP is the local control plane.
	CP *controlplane.ControlPlane
	// Root is the repository's root directory.
	Root string
	// Env is node-manager's stack on CP (bashible-apiserver and
	// node-manager-controller installed, ready to start); nil in a bare suite.
	Env *stack.Environment
	// Kube and NM are clients with the cluster administrator's identity.
	Kube kubernetes.Interface
	NM   versioned.Interface
	// CAPI is the running Cluster API core manager, with Options.ClusterAPI;
	// nil otherwise.
	CAPI *stack.ClusterAPI

	opts Options
}

// Options say how a suite's environment is set up.
type Options struct {
	// Bare starts only the control plane with node-manager's CRDs: nothing
	// is built and no component's manifests are applied. Suites that test
	// the control plane itself or run a controller in-process use it.
	Bare bool
	// AfterStop runs once the control plane has stopped; its error fails
	// the suite. May be nil.
	AfterStop func() error
	// ClusterAPI also installs and starts upstream Cluster API's core
	// manager (bin/capi-controller-manager, its CRDs and webhooks from the
	// pinned module; hack/stack/clusterapi.go) as its own ServiceAccount. Only
	// the suites that need it pay for it (a few seconds). Not with Bare.
	ClusterAPI bool
}

// New is a suite's Framework, empty until Run starts the environment.
func New(opts Options) *Framework { return &Framework{opts: opts} }

// Run is the suite's TestMain body. It starts the environment, calls setUp
// (may be nil) to prepare the suite (seed objects, components; the cleanup
// it returns, if not nil, runs after the tests, before the control plane
// stops), runs the tests and stops everything. A set-up failure or a
// failed test prints the components' log tails.
func (f *Framework) Run(m *testing.M, setUp func(ctx context.Context) (cleanup func(), err error)) int {
	// The stack's binaries are built before the set-up's time starts: a
	// build is bounded by go build itself, and on a loaded machine three
	// suites building at once took the whole set-up time and left none
	// for the control plane (CI-like load: etcd "not healthy" at 4 min).
	if !f.opts.Bare {
		if err := stack.Build(); err != nil {
			fmt.Fprintf(os.Stderr, "set up the e2e environment: %v\n", err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), setUpTimeout)
	defer cancel()
	if err := f.start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "set up the e2e environment: %v\n", err)
		return 1
	}
	code := f.run(ctx, m, setUp)
	if err := f.CP.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop the control plane: %v\n", err)
		code = 1
	}
	if f.opts.AfterStop != nil {
		if err := f.opts.AfterStop(); err != nil {
			fmt.Fprintf(os.Stderr, "after the control plane stopped: %v\n", err)
			code = 1
		}
	}
	return code
}

// run sets the suite up and runs its tests; a signal stops the control
// plane on the way out.
func (f *Framework) run(ctx context.Context, m *testing.M, setUp func(context.Context) (func(), error)) int {
	defer f.CP.StopOnSignal()()
	if setUp != nil {
		cleanup, err := setUp(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "set up the suite: %v\nlogs:\n%s", err, f.CP.LogTails(40))
			return 1
		}
		if cleanup != nil {
			defer cleanup()
		}
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs:\n%s", f.CP.LogTails(80))
	}
	return code
}

// start brings up the environment. On error nothing is left running.
func (f *Framework) start(ctx context.Context) error {
	if f.opts.Bare {
		root, err := controlplane.RepoRoot()
		if err != nil {
			return err
		}
		cp, err := controlplane.Start(ctx, controlplane.Config{})
		if err != nil {
			return fmt.Errorf("start the control plane: %w", err)
		}
		if err := installCRDs(ctx, cp, root); err != nil {
			_ = cp.Stop()
			return fmt.Errorf("%w\nlogs:\n%s", err, cp.LogTails(40))
		}
		f.CP, f.Root = cp, root
	} else {
		env, err := stack.NewEnvironment(ctx)
		if err != nil {
			return err
		}
		f.CP, f.Root, f.Env = env.CP, env.Root, env
		if f.opts.ClusterAPI {
			capi, err := stack.StartClusterAPI(ctx, env.CP, env.Root, env.Applier)
			if err != nil {
				_ = env.CP.Stop()
				return fmt.Errorf("start Cluster API: %w\nlogs:\n%s", err, env.CP.LogTails(40))
			}
			f.CAPI = capi
		}
	}
	cfg := f.CP.AdminConfig()
	f.Kube = kubernetes.NewForConfigOrDie(cfg)
	f.NM = versioned.NewForConfigOrDie(cfg)
	return nil
}

func installCRDs(ctx context.Context, cp *controlplane.ControlPlane, root string) error {
	applier, err := cp.NewApplier()
	if err != nil {
		return err
	}
	if err := applier.ApplyFiles(ctx, filepath.Join(root, "manifests", "crds")); err != nil {
		return fmt.Errorf("install the CRDs: %w", err)
	}
	return nil
}

// OverlayDir is the template overlay whose steps are harmless on a
// simulated node (hack/e2e/bashible/testdata/overlay); the suites that run
// bashible.sh on simulated nodes start bashible-apiserver with it.
func (f *Framework) OverlayDir() string {
	return filepath.Join(f.Root, "hack", "e2e", "bashible", "testdata", "overlay")
}
