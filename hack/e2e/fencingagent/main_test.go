// Package fencingagent is the e2e suite of fencing-agent: the real binary,
// three per group, each as the fencing-agent ServiceAccount with a token
// bound to a Pod on its node (so the manifests' RBAC and admission policy
// are what it runs under), a FIFO as its watchdog (no real watchdog is
// ever armed here), and its own TCP proxy to kube-apiserver that a test
// can cut.
package fencingagent

import (
	"os"
	"testing"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// f is not bare: the stack builds fencing-agent and applies its RBAC and
// the admission policies; neither bashible-apiserver nor
// node-manager-controller is started, as the agent needs neither.
var f = framework.New(framework.Options{})

func TestMain(m *testing.M) { os.Exit(f.Run(m, nil)) }

// startGroup starts a Watchdog-mode group of three agents
// (framework.StartFencedGroup) and waits until all three are armed.
func startGroup(t *testing.T, name string) *framework.FencedGroup {
	t.Helper()
	return f.StartFencedGroup(t, name, framework.FencedGroupOptions{})
}

// startGroupIn is startGroup in the given fencing mode; in Notify mode
// "armed" means labelled and ready, with nothing written to the device.
func startGroupIn(t *testing.T, name, mode string) *framework.FencedGroup {
	t.Helper()
	return f.StartFencedGroup(t, name, framework.FencedGroupOptions{Mode: mode})
}
