package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Indexes of the components in procs, in the order Start starts them.
const (
	etcdIndex      = 0
	apiServerIndex = 1
)

// RestartEtcd stops etcd (SIGTERM, as a supervisor would) and starts it
// again on the same ports with the same data directory, then waits until it
// is healthy and kube-apiserver is ready on it again: the drill of an etcd
// restart, where every object survives and clients see errors meanwhile.
func (cp *ControlPlane) RestartEtcd(ctx context.Context) error {
	p, err := cp.restart(etcdIndex)
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := cp.waitHealthy(ctx, p, plain, cp.etcdURL()+"/health", `"health":"true"`); err != nil {
		return err
	}
	return cp.waitAPIServerReady(ctx)
}

// RestartAPIServer stops kube-apiserver (SIGTERM) and starts it again on
// the same port with the same certificates and etcd, then waits until it is
// ready: every client keeps its address and credentials and must reconnect.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if _, err := cp.restart(apiServerIndex); err != nil {
		return err
	}
	return cp.waitAPIServerReady(ctx)
}

// restart stops procs[i] deliberately (its exit is no failure) and starts
// the same command again in its place.
func (cp *ControlPlane) restart(i int) (*process, error) {
	cp.mu.Lock()
	old := cp.procs[i]
	cp.mu.Unlock()
	cp.logf("restarting %s", old.name)
	old.stop(15 * time.Second)
	p, err := old.again()
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs[i] = p
	cp.mu.Unlock()
	go cp.watch(p)
	return p, nil
}

// waitAPIServerReady waits for kube-apiserver's /readyz, which includes
// its etcd check.
func (cp *ControlPlane) waitAPIServerReady(ctx context.Context) error {
	cp.mu.Lock()
	p := cp.procs[apiServerIndex]
	cp.mu.Unlock()
	admin, err := cp.adminHTTPClient()
	if err != nil {
		return err
	}
	if err := cp.waitHealthy(ctx, p, admin, cp.APIServerURL+"/readyz", "ok"); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	return nil
}
