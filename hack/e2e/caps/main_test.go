// Package caps is the e2e suite of static machines (Cluster API Provider
// Static): the StaticInstance and SSHCredentials CRDs with their CEL rules,
// the admission policies that replace Deckhouse's webhook, and the RBAC
// that keeps SSH keys and passwords readable only by caps-controller-manager
// and cluster admins, all against a real kube-apiserver; the SSH layer
// against Debian's sshd in simulated hosts; and caps-controller-manager
// itself, as its ServiceAccount, with the real capi-controller-manager,
// node-manager-controller (--cluster-api) and bashible-apiserver, joining
// (the group's real bootstrap, which fetches the bundle from the local
// control plane and runs bashible on the host), cleaning, adopting,
// replacing and resuming simulated hosts over SSH.
package caps

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f = framework.New(framework.Options{ClusterAPI: true})
	// dyn reads Cluster API's objects.
	dyn dynamic.Interface
	// capsManager is the running caps-controller-manager (restartCAPS
	// replaces it).
	capsManager *stack.Controller
)

// capsArgs are caps-controller-manager's flags in this suite.
var capsArgs = []string{"--bootstrap-timeout=90s", "--cleanup-timeout=60s"}

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
	if err := stack.InstallPolicies(ctx, f.Root, applier); err != nil {
		return nil, err
	}
	if err := waitPoliciesEnforced(ctx); err != nil {
		return nil, err
	}
	// The API endpoint the manual-bootstrap scripts and the bundles carry
	// (the local kube-apiserver has no endpoint reconciler): the local
	// kube-apiserver itself, which the simulated hosts reach, so their
	// bootstrap fetches its bundle from here and bashible applies it.
	if _, err := stack.PublishLocalAPIServer(ctx, f.Kube, f.CP); err != nil {
		return nil, err
	}
	// bashible-apiserver serves the bundles, with the steps that are
	// harmless on a simulated host (framework.OverlayDir).
	if _, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{TemplatesDir: f.OverlayDir()}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	if _, err := f.Env.StartController(ctx, stack.ControllerOptions{ExtraArgs: []string{
		"--cluster-api", "--cluster-api-kubeconfig=" + f.CAPI.Kubeconfig}}); err != nil {
		return nil, fmt.Errorf("start node-manager-controller: %w", err)
	}
	if capsManager, err = f.Env.StartCAPS(ctx, stack.ControllerOptions{Identity: "caps-1", ExtraArgs: capsArgs}); err != nil {
		return nil, fmt.Errorf("start caps-controller-manager: %w", err)
	}
	dyn, err = dynamic.NewForConfig(f.CP.AdminConfig())
	return nil, err
}

// waitPoliciesEnforced waits until kube-apiserver enforces both
// StaticInstance policies (it loads a new policy a moment after it is
// created): a dry-run of what each refuses must be refused.
func waitPoliciesEnforced(ctx context.Context) error {
	badLabel := &deckhousev1alpha2.StaticInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Labels: map[string]string{deckhousev1.AllowBootstrapLabel: "maybe"}},
		Spec: deckhousev1alpha2.StaticInstanceSpec{Address: "192.0.2.1",
			CredentialsRef: &corev1.ObjectReference{Kind: "SSHCredentials", Name: "probe"}},
	}
	badSelector := &deckhousev1.NodeGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"},
		Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, StaticInstances: &deckhousev1.StaticInstancesSpec{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{deckhousev1.AllowBootstrapLabel: "true"}}}},
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, errInstance := f.NM.DeckhouseV1alpha2().StaticInstances().Create(ctx, badLabel, dry)
		_, errGroup := f.NM.DeckhouseV1().NodeGroups().Create(ctx, badSelector, dry)
		return errInstance != nil && errGroup != nil, nil
	})
	if err != nil {
		return fmt.Errorf("the StaticInstance admission policies are not enforced: %w", err)
	}
	return nil
}
