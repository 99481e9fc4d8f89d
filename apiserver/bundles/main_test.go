package bundles

import (
	"os"
	"testing"

	"github.com/node-manager/node-manager/templates/sandbox"
)

// The test binary is also the render worker of the sandboxed tests.
func TestMain(m *testing.M) {
	sandbox.RunWorkerIfRequested()
	os.Exit(m.Run())
}
