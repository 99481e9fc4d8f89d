package stack

import (
	"context"
	"path/filepath"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// CAPSUser is caps-controller-manager's identity: the RBAC of
// manifests/caps-controller-manager is bound to this ServiceAccount, so the
// e2e runs prove that it is enough (and that it alone reads SSHCredentials).
const CAPSUser = "system:serviceaccount:" + deckhousev1.Namespace + ":" + deckhousev1.CAPSControllerManagerName

// InstallCAPS applies caps-controller-manager's RBAC from manifests/.
func InstallCAPS(ctx context.Context, root string, applier *controlplane.Applier) error {
	return applier.ApplyFiles(ctx, filepath.Join(root, "manifests", deckhousev1.CAPSControllerManagerName, "rbac.yaml"))
}

// StartCAPS starts caps-controller-manager (Cluster API Provider Static) as
// its ServiceAccount and waits until its informers have synced. It needs
// Cluster API (StartClusterAPI) and InstallCAPS.
func (e *Environment) StartCAPS(ctx context.Context, opts ControllerOptions) (*Controller, error) {
	return e.startManager(ctx, deckhousev1.CAPSControllerManagerName, CAPSUser, opts)
}
