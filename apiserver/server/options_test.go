package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRenderLimitsAreValidatedWithTheFlagsName(t *testing.T) {
	for _, tc := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Render.Workers = 0 }, "--render-workers 0 must be at least 1"},
		{func(o *Options) { o.Render.Timeout = 100 * time.Millisecond }, "--render-timeout 100ms must be at least 1s"},
		{func(o *Options) { o.Render.WorkerMemory = "lots" }, `--render-worker-memory "lots"`},
		{func(o *Options) { o.Render.WorkerMemory = "8Mi" }, "--render-worker-memory 8Mi is below 16Mi"},
		{func(o *Options) { o.Render.WorkerIdleTimeout = -time.Second }, "--render-worker-idle-timeout -1s must not be negative"},
	} {
		o := NewOptions()
		tc.change(o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error containing %q, got %v", tc.want, err)
		}
	}
	o := NewOptions()
	if mem, err := o.workerMemory(); err != nil || mem != 128<<20 || o.Render.Workers != 2 || o.Render.Timeout != 10*time.Second {
		t.Errorf("defaults: %d workers, %s, %d bytes (%v); want 2, 10s, 128Mi", o.Render.Workers, o.Render.Timeout, mem, err)
	}
}

// A renew deadline at or above the lease duration would let a cut-off
// leader keep publishing after another replica took the Lease.
func TestLeaderElectionTimesMustKeepOnePublisher(t *testing.T) {
	for _, tc := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.LeaderElection.RenewDeadline = 15 * time.Second }, "--leader-elect-renew-deadline (15s) < --leader-elect-lease-duration (15s)"},
		{func(o *Options) { o.LeaderElection.RetryPeriod = 10 * time.Second }, "--leader-elect-retry-period (10s) < --leader-elect-renew-deadline (10s)"},
		{func(o *Options) { o.ShutdownDelay = -time.Second }, "--shutdown-delay-duration -1s must not be negative"},
	} {
		o := NewOptions()
		tc.change(o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error containing %q, got %v", tc.want, err)
		}
	}
	if err := NewOptions().Validate(); err != nil && strings.Contains(err.Error(), "leader") {
		t.Errorf("the default Lease times are refused: %v", err)
	}
}

// The server's clients of the cluster get --kube-api-qps and
// --kube-api-burst, not client-go's defaults (5 and 10), which held a
// publish at 100 groups seconds behind its status writes.
func TestTheClientsGetTheAPIRateFlags(t *testing.T) {
	o := NewOptions()
	if o.APIQPS != 50 || o.APIBurst != 100 {
		t.Errorf("defaults: --kube-api-qps=%g --kube-api-burst=%d, want 50 and 100", o.APIQPS, o.APIBurst)
	}
	o.APIQPS, o.APIBurst = 0, 100
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--kube-api-qps=0 and --kube-api-burst=100: both must be positive") {
		t.Errorf("a zero --kube-api-qps: got %v", err)
	}

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o = NewOptions()
	o.Generic.CoreAPI.CoreAPIKubeconfigPath = kubeconfig
	o.Generic.Authentication, o.Generic.Authorization = nil, nil
	o.Generic.SecureServing.BindPort = 0
	o.Generic.SecureServing.ServerCert.CertDirectory = dir
	o.APIQPS, o.APIBurst = 7, 9
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Generic.ClientConfig; got.QPS != 7 || got.Burst != 9 {
		t.Errorf("the clients' rate: QPS %g, burst %d; want 7 and 9", got.QPS, got.Burst)
	}
}
