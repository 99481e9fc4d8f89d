// Package caps is the e2e suite of static machines (Cluster API Provider
// Static): the StaticInstance and SSHCredentials CRDs with their CEL rules,
// the admission policies that replace Deckhouse's webhook, and the RBAC
// that keeps SSH keys and passwords readable only by caps-controller-manager
// and cluster admins, all against a real kube-apiserver.
package caps

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var f = framework.New(framework.Options{Bare: true})

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

// setUp installs what the tests read: the namespace, every component's
// RBAC (to ask who may read SSHCredentials) and the admission policies.
func setUp(ctx context.Context) (func(), error) {
	applier, err := f.CP.NewApplier()
	if err != nil {
		return nil, err
	}
	m := filepath.Join(f.Root, "manifests")
	if err := applier.ApplyFiles(ctx,
		filepath.Join(m, "bashible-apiserver", "namespace.yaml"),
		filepath.Join(m, "bashible-apiserver", "rbac.yaml"),
		filepath.Join(m, "node-manager-controller", "rbac.yaml"),
		filepath.Join(m, "fencing-agent", "rbac.yaml"),
		filepath.Join(m, "early-oom", "rbac.yaml"),
		filepath.Join(m, "caps-controller-manager", "rbac.yaml"),
	); err != nil {
		return nil, err
	}
	return nil, stack.InstallPolicies(ctx, f.Root, applier)
}
