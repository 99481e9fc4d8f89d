// Package foundation is the e2e suite of the foundation: the local control
// plane itself, node-manager's CRDs (validation, defaults, printer columns)
// and the generated clients, all against a real kube-apiserver.
package foundation

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// The suite shares one bare control plane; tests that need their own
// start it.
var (
	f   = framework.New(framework.Options{Bare: true, AfterStop: checkNothingLeft})
	dyn dynamic.Interface
	// procs and dir are the shared control plane's processes and
	// directory, which must be gone once it has stopped.
	procs []controlplane.ProcessInfo
	dir   string
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(context.Context) (func(), error) {
	dyn = dynamic.NewForConfigOrDie(f.CP.AdminConfig())
	procs, dir = f.CP.Processes(), f.CP.Dir()
	return nil, nil
}

func checkNothingLeft() error {
	if leaks := leftovers(procs, dir); len(leaks) > 0 {
		return fmt.Errorf("the suite's control plane left things behind: %v", leaks)
	}
	return nil
}
