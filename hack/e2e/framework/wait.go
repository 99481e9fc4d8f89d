package framework

import (
	"context"
	"fmt"
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
//
// A detail, when given, says what was still missing at the last look; the
// failure message ends with it.
func Poll(t testing.TB, what string, cond func(ctx context.Context) (bool, error), detail ...func() string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(Context(t), 100*time.Millisecond, 90*time.Second, true, cond); err != nil {
		for _, d := range detail {
			err = fmt.Errorf("%w; at the last look: %s", err, d())
		}
		t.Fatalf("%s: %v", what, err)
	}
}
