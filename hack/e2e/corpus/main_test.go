// Package corpus is the compatibility e2e suite: every NodeGroup,
// NodeGroupConfiguration and NodeUser example Deckhouse publishes in its
// documentation, at the API version it is published at
// (testdata/, one file per example, each headed by the page and section it
// is from) is applied through the real API at once, and must be accepted,
// rendered into the served bundles, clean under bash -n and shellcheck, call
// only helpers the library defines, and — the ones for Debian — run in a
// Debian root as a fresh node's bashible runs them. Deckhouse's documented
// objects at older versions (testdata/versions) are read at every version
// the CRDs serve (versions_test.go), and the take-over of Deckhouse's
// published CRDs (testdata/deckhouse-crds) runs on a control plane of its
// own (takeover_test.go).
package corpus

import (
	"context"
	"fmt"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f = framework.New(framework.Options{})
	// clusterGroups are the NodeGroups every Deckhouse cluster has before a
	// user writes anything (dhctl creates master at bootstrap), which
	// published configurations select by name; setUp creates them, outside
	// the corpus.
	clusterGroups = []string{deckhousev1.MasterNodeGroup}
	// examples are the corpus as loaded and applied by setUp.
	examples []*example
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

// setUp loads the corpus, creates the cluster's own groups, applies the
// corpus published at its kinds' storage versions (an object the API
// refuses is recorded on its example, for the tests to report), starts
// bashible-apiserver, applies the rest (older versions, which kube-apiserver
// converts through bashible-apiserver's conversion webhook) and waits until
// every accepted group is published or reports that it failed to render.
func setUp(ctx context.Context) (func(), error) {
	var err error
	if examples, err = loadCorpus("testdata"); err != nil {
		return nil, err
	}
	if err := stack.PublishAPIEndpoints(ctx, f.Kube, "192.0.2.10"); err != nil {
		return nil, err
	}
	for _, name := range clusterGroups {
		group := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
		if _, err := f.CreateGroup(ctx, group); err != nil {
			return nil, fmt.Errorf("create the cluster's own NodeGroup %s: %w", name, err)
		}
	}
	if err := applyCorpus(ctx, examples, (*example).atStorageVersion); err != nil {
		return nil, err
	}
	server, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{})
	if err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	older := func(e *example) bool { return !e.atStorageVersion() }
	if err := applyCorpus(ctx, examples, older); err != nil {
		server.Stop()
		return nil, err
	}
	if err := f.Env.WaitPublished(ctx); err != nil {
		server.Stop()
		return nil, server.Failure(err)
	}
	return server.Stop, nil
}
