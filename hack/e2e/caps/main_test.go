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

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
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
		filepath.Join(m, deckhousev1.BashibleAPIServerName, "namespace.yaml"),
		filepath.Join(m, deckhousev1.BashibleAPIServerName, "rbac.yaml"),
		filepath.Join(m, deckhousev1.NodeManagerControllerName, "rbac.yaml"),
		filepath.Join(m, deckhousev1.FencingAgentName, "rbac.yaml"),
		filepath.Join(m, deckhousev1.EarlyOOMName, "rbac.yaml"),
		filepath.Join(m, deckhousev1.CAPSControllerManagerName, "rbac.yaml"),
	); err != nil {
		return nil, err
	}
	return nil, stack.InstallPolicies(ctx, f.Root, applier)
}
