package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/procstat"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	// serveOnly skips the render and apply benchmarks (-serve-only).
	serveOnly = false
	// serverEnv is set in the server's environment after the Deployment's
	// GOGC and GOMEMLIMIT (-server-env).
	serverEnv envFlag
	// profileDir, when set (-profile), receives bashible-apiserver's heap
	// profile, MemStats and smaps at each point memoryFigures is called.
	profileDir = ""
)

// envFlag is a repeatable NAME=VALUE flag.
type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, ",") }
func (e *envFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q is not NAME=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

// memoryFigures prints the server's resident memory at a point of the
// bench, split as /proc/<pid>/status splits it, and its render workers'
// (child processes) apart: name_rss, name_rss_anon, name_rss_file,
// name_workers, name_workers_rss and name_rss_with_workers, which it
// returns (proportional set sizes when workers run: two workers share
// their binary's pages).
func memoryFigures(cp *controlplane.ControlPlane, server *stack.APIServer, name string) (float64, error) {
	pid := server.PID()
	for _, f := range []struct{ suffix, field string }{{"", "VmRSS"}, {"_anon", "RssAnon"}, {"_file", "RssFile"}} {
		v, err := procstat.Memory(pid, "status", f.field)
		if err != nil {
			return 0, err
		}
		figure(name+"_rss"+f.suffix, mib(v), "MiB")
	}
	tree, err := procstat.MemoryTree(pid)
	if err != nil {
		return 0, err
	}
	total := tree.Total
	figure(name+"_workers", float64(len(tree.Children)), "count")
	figure(name+"_workers_rss", mib(tree.ChildrenRSS), "MiB")
	figure(name+"_rss_with_workers", mib(total), "MiB")
	if profileDir != "" {
		if err := saveProfile(cp, server, filepath.Join(profileDir, name)); err != nil {
			return 0, err
		}
	}
	return mib(total), nil
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// workerIdleWait bounds the wait for the render workers to stop: the
// server stops one idle for 10 s (--render-worker-idle-timeout), and has
// returned the heap its renders freed 5 s after the last one.
const workerIdleWait = 30 * time.Second

// serveLocalStack has clients fetch the local stack's bundles for a while
// and prints the server's memory serving them (local_stack_*), then again
// once its render workers, idle, have stopped (local_stack_idle_*: what
// the server holds between changes).
func serveLocalStack(cp *controlplane.ControlPlane, server *stack.APIServer) error {
	for _, group := range []string{"master", "worker"} {
		res := load(cp, server.URL()+"/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/"+group, time.Second)
		if res.errors > 0 {
			return fmt.Errorf("GET of group %s's bundle failed %d times", group, res.errors)
		}
	}
	if _, err := memoryFigures(cp, server, "local_stack"); err != nil {
		return err
	}
	_, err := idleMemoryFigures(cp, server, "local_stack_idle")
	return err
}

// idleMemoryFigures waits for the server's render workers, idle, to stop,
// then prints memoryFigures as name.
func idleMemoryFigures(cp *controlplane.ControlPlane, server *stack.APIServer, name string) (float64, error) {
	// No event tells that a child process exited: /proc is looked at.
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, workerIdleWait, true, func(context.Context) (bool, error) {
		return len(procstat.Children(server.PID())) == 0, nil
	})
	if err != nil {
		return 0, fmt.Errorf("the server's render workers did not stop within %s of idling: %w", workerIdleWait, err)
	}
	return memoryFigures(cp, server, name)
}

// saveProfile writes the server's heap profile (after a collection), its
// statistics (heap.txt, with the runtime's MemStats), smaps and smaps_rollup,
// and its status to dir.
func saveProfile(cp *controlplane.ControlPlane, server *stack.APIServer, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The profile first: it collects, so that MemStats then show what is live.
	for _, f := range []struct{ file, query string }{{"heap.pb.gz", "gc=1"}, {"heap.txt", "debug=1"}} {
		data, err := get(newClient(cp), server.URL()+"/debug/pprof/heap?"+f.query)
		if err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.file), data, 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{"smaps", "smaps_rollup", "status"} {
		if err := copyFile(fmt.Sprintf("/proc/%d/%s", server.PID(), f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: profile of %s in %s\n", filepath.Base(dir), dir)
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
