package server

import (
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
