// Package agent is the e2e suite of bashible on the node: the real
// bashible.sh served by bashible-apiserver, run by simulated nodes (a
// directory as their root, real node client certificates) against a
// template overlay whose steps are harmless, with assertions on Node
// annotations, Events, Instance conditions and the nodes' files.
package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	cp       *controlplane.ControlPlane
	server   *stack.APIServer
	kube     kubernetes.Interface
	nm       versioned.Interface
	repoRoot string
)

func TestMain(m *testing.M) { os.Exit(stack.RunSuite(m, setUp)) }

func setUp(ctx context.Context, env *stack.Environment) (func(), error) {
	cp, repoRoot = env.CP, env.Root
	kube = kubernetes.NewForConfigOrDie(cp.AdminConfig())
	nm = versioned.NewForConfigOrDie(cp.AdminConfig())
	for name, mode := range map[string]deckhousev1.ApprovalMode{"sim": deckhousev1.ApprovalManual, "rolling": deckhousev1.ApprovalRollingUpdate, "other": deckhousev1.ApprovalAutomatic} {
		ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{
			NodeType: deckhousev1.NodeTypeStatic, Disruptions: &deckhousev1.DisruptionsSpec{ApprovalMode: mode},
		}}
		if _, err := nm.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create NodeGroup %s: %w", name, err)
		}
	}
	var err error
	server, err = env.StartRegistered(ctx, stack.APIServerOptions{
		TemplatesDir: filepath.Join(repoRoot, "hack", "e2e", "agent", "testdata", "overlay"),
	})
	if err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	return nil, nil
}
