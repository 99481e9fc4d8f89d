// Package corpus is the compatibility e2e suite: every NodeGroup and
// NodeGroupConfiguration example Deckhouse publishes in its documentation
// (testdata/, one file per example, each headed by the page and section it
// is from) is applied through the real API at once, and must be accepted,
// rendered into the served bundles, clean under bash -n and shellcheck, call
// only helpers the library defines, and — the ones for Debian — run in a
// Debian root as a fresh node's bashible runs them.
package corpus

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f = framework.New(framework.Options{})
	// examples are the corpus as loaded and applied by setUp.
	examples []*example
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

// setUp loads the corpus, applies all of it at once (an object the API
// refuses is recorded on its example, for the tests to report) and starts
// bashible-apiserver, which returns once every accepted group is published
// or reports that it failed to render.
func setUp(ctx context.Context) (func(), error) {
	var err error
	if examples, err = loadCorpus("testdata"); err != nil {
		return nil, err
	}
	if err := stack.PublishAPIEndpoints(ctx, f.Kube, "192.0.2.10"); err != nil {
		return nil, err
	}
	if err := applyCorpus(ctx, examples); err != nil {
		return nil, err
	}
	server, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{})
	if err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	return server.Stop, nil
}
