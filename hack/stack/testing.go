package stack

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestContext is a context for one test, cancelled when the test ends and
// bounded at three minutes.
func TestContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Poll calls cond every 100 ms until it reports done, and fails the test
// naming what it waited for after 90 seconds or on cond's error.
func Poll(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(TestContext(t), 100*time.Millisecond, 90*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// RunSuite is an e2e suite's TestMain: it starts an Environment, lets
// setUp prepare the suite (clients, seed objects, components; cleanup,
// if not nil, runs after the tests), runs the tests and stops everything.
// A set-up failure or a failed test prints the components' log tails.
func RunSuite(m *testing.M, setUp func(ctx context.Context, env *Environment) (cleanup func(), err error)) int {
	var env *Environment
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		if env != nil {
			fmt.Fprintf(os.Stderr, "logs:\n%s", env.CP.LogTails(40))
		}
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err := NewEnvironment(ctx)
	if err != nil {
		return fail("set up: %v", err)
	}
	defer env.CP.StopOnSignal()()
	defer func() { _ = env.CP.Stop() }()
	cleanup, err := setUp(ctx, env)
	if err != nil {
		return fail("set up the suite: %v", err)
	}
	if cleanup != nil {
		defer cleanup()
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs:\n%s", env.CP.LogTails(80))
	}
	return code
}
