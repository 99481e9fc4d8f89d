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
