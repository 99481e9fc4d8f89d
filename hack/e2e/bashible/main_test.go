// Package agent is the e2e suite of bashible on the node: the real
// bashible.sh served by bashible-apiserver, run by simulated nodes (a
// directory as their root, real node client certificates) against a
// template overlay whose steps are harmless, with assertions on Node
// annotations, Events, Instance conditions and the nodes' files.
//
// The tests run in parallel (t.Parallel) on the suite's control plane and
// bashible-apiserver: each has nodes of its own, and a test that changes a
// group's configuration has a group of its own. The one test that replaces
// the shared bashible-apiserver stays serial, and so runs before the rest.
package bashible

import (
	"context"
	"fmt"
	"os"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f      = framework.New(framework.Options{})
	server *stack.APIServer
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	// The groups the tests share: none changes their configuration (a test
	// that does makes a group of its own, ownGroup), so tests that run in
	// parallel see the same bundle of sim throughout.
	for name, mode := range map[string]deckhousev1.ApprovalMode{"sim": deckhousev1.ApprovalManual, "other": deckhousev1.ApprovalAutomatic} {
		ng := framework.NewGroup(name, func(ng *deckhousev1.NodeGroup) {
			ng.Spec.Disruptions = &deckhousev1.DisruptionsSpec{ApprovalMode: mode}
		})
		if _, err := f.CreateGroup(ctx, ng); err != nil {
			return nil, fmt.Errorf("create NodeGroup %s: %w", name, err)
		}
	}
	var err error
	server, err = f.Env.StartRegistered(ctx, stack.APIServerOptions{TemplatesDir: f.OverlayDir()})
	if err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	return nil, nil
}
