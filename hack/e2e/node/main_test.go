// Package node is the e2e suite of bashible on the node: the real
// bashible.sh served by bashible-apiserver, run by simulated nodes (a
// directory as their root, real node client certificates) against a
// template overlay whose steps are harmless, with assertions on Node
// annotations, Events, Instance conditions and the nodes' files.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	cp       *controlplane.ControlPlane
	server   *stack.Bashible
	kube     kubernetes.Interface
	nm       versioned.Interface
	repoRoot string
)

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		if cp != nil {
			fmt.Fprintf(os.Stderr, "logs:\n%s", cp.LogTails(40))
		}
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err := stack.NewEnvironment(ctx)
	if err != nil {
		return fail("set up: %v", err)
	}
	cp, repoRoot = env.CP, env.Root
	defer cp.StopOnSignal()()
	defer func() { _ = cp.Stop() }()
	kube = kubernetes.NewForConfigOrDie(cp.AdminConfig())
	nm = versioned.NewForConfigOrDie(cp.AdminConfig())
	for name, mode := range map[string]deckhousev1.ApprovalMode{"sim": deckhousev1.ApprovalManual, "rolling": deckhousev1.ApprovalRollingUpdate, "other": deckhousev1.ApprovalAutomatic} {
		ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{
			NodeType: deckhousev1.NodeTypeStatic, Disruptions: &deckhousev1.DisruptionsSpec{ApprovalMode: mode},
		}}
		if _, err := nm.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{}); err != nil {
			return fail("create NodeGroup %s: %v", name, err)
		}
	}
	server, err = env.StartRegistered(ctx, stack.BashibleOptions{
		TemplatesDir: filepath.Join(repoRoot, "hack", "e2e", "node", "testdata", "overlay"),
	})
	if err != nil {
		return fail("start bashible-apiserver: %v", err)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs:\n%s", cp.LogTails(60))
	}
	return code
}
