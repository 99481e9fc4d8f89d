package loop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestASyncsLinesSayWhichControllerAndKey: a sync logs through
// klog.FromContext, and each of its lines, and the loop's own line about a
// failed sync, carries controller= and key=.
func TestASyncsLinesSayWhichControllerAndKey(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	done := make(chan struct{})
	l := New("example", nil, func(ctx context.Context, key string) error {
		defer close(done)
		klog.FromContext(ctx).Info("Synced a key")
		return errors.New("boom")
	})
	l.Add("group-a")
	go l.Run(ctx, 1)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the key was not synced")
	}
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	// The loop logs the failure after the sync returns.
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(buffer.String(), "Reconcile failed"), nil
	})
	logs := buffer.String()
	for _, msg := range []string{"Synced a key", "Reconcile failed"} {
		line := ""
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, msg) {
				line = l
			}
		}
		if !strings.Contains(line, `controller="example"`) || !strings.Contains(line, `key="group-a"`) {
			t.Errorf("the line %q (%q) lacks controller and key; logs:\n%s", msg, line, logs)
		}
	}
}
