// Package join is the e2e suite of a real join: a Debian machine (the
// cached Debian root, booted by systemd-nspawn with systemd as PID 1,
// framework/debianroot.Boot) is given its group's manual-bootstrap script
// and from then on nothing is done by hand: bashible fetches the bundle
// with the bootstrap token, the steps install and start containerd (the
// pinned module's, with Debian's runc), the local API proxy and the kubelet
// (the pinned module's), the kubelet joins through TLS bootstrap,
// node-manager-controller approves its certificate and records its
// Instance, the Node registers with the group's labels, taint and
// checksum, becomes Ready once a CNI configuration is in place, runs a pod,
// and takes a group update through the approval protocol.
//
// The suite runs against the framework's control plane with
// bashible-apiserver and node-manager-controller as processes, as root.
package join

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var f = framework.New(framework.Options{})

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	if os.Geteuid() != 0 {
		return nil, nil // the test skips: a machine boots only as root
	}
	s, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{})
	if err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	c, err := f.Env.StartController(ctx, stack.ControllerOptions{})
	if err != nil {
		return nil, fmt.Errorf("start node-manager-controller: %w", err)
	}
	harness.apiServer, harness.controller = s, c
	return nil, nil
}
