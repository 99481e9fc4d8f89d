package framework

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Context is a context for one test, cancelled when the test ends and
// bounded at three minutes.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Poll calls cond every 100 ms until it reports done, and fails the test
// naming what it waited for after 90 seconds or on cond's error.
func Poll(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(Context(t), 100*time.Millisecond, 90*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
