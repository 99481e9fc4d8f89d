package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	// serveOnly skips the render and apply benchmarks (-serve-only).
	serveOnly = false
	// serverEnv is set in the server's environment after the Deployment's
	// GOGC and GOMEMLIMIT (-server-env).
	serverEnv envFlag
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

// profileDir, when set (-profile), receives a heap profile and the smaps of
// bashible-apiserver at each point memoryFigures is called.
var profileDir = ""

// memoryFigures returns the resident memory of the server and its workers
// together (proportional set sizes when workers run), and prints the server's resident memory at a point of the
// bench, split as /proc/<pid>/status splits it, and its render workers'
// (child processes) apart: name_rss, name_rss_anon, name_rss_file,
// name_workers_rss and name_workers.
func memoryFigures(cp *controlplane.ControlPlane, server *stack.APIServer, name string) (float64, error) {
	pid := server.PID()
	var rss float64
	for _, f := range []struct{ suffix, field string }{{"", "VmRSS:"}, {"_anon", "RssAnon:"}, {"_file", "RssFile:"}} {
		v, err := statusField(pid, f.field)
		if err != nil {
			return 0, err
		}
		if f.suffix == "" {
			rss = v
		}
		figure(name+"_rss"+f.suffix, v/(1<<20), "MiB")
	}
	workers, err := children(pid)
	if err != nil {
		return 0, err
	}
	var workersRSS float64
	for _, w := range workers {
		v, err := statusField(w, "VmRSS:")
		if err != nil {
			continue // it stopped meanwhile
		}
		workersRSS += v
	}
	figure(name+"_workers", float64(len(workers)), "count")
	figure(name+"_workers_rss", workersRSS/(1<<20), "MiB")
	// Together: a worker runs the server's binary, so most of its resident
	// pages are the server's too; proportional set sizes count each page
	// once.
	total := rss
	if len(workers) > 0 {
		total = 0
		for _, p := range append([]int{pid}, workers...) {
			v, err := procField(p, "smaps_rollup", "Pss:")
			if err != nil && p == pid {
				return 0, err
			}
			total += v
		}
	}
	figure(name+"_rss_with_workers", total/(1<<20), "MiB")
	if profileDir == "" {
		return total, nil
	}
	return total, saveProfile(cp, server, filepath.Join(profileDir, name))
}

// serveLocalStack has clients fetch the local stack's bundles for a while
// and prints the server's memory serving them (local_stack_*).
func serveLocalStack(cp *controlplane.ControlPlane, server *stack.APIServer) error {
	for _, group := range []string{"master", "worker"} {
		res := load(cp, server.URL()+"/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/"+group, time.Second)
		if res.errors > 0 {
			return fmt.Errorf("GET of group %s's bundle failed %d times", group, res.errors)
		}
	}
	_, err := memoryFigures(cp, server, "local_stack")
	return err
}

// runtimeSettings are the Go runtime's environment variables that
// bashible-apiserver's Deployment may set.
var runtimeSettings = []string{"GOGC", "GOMEMLIMIT"}

// useShippedRuntimeSettings sets GOGC and GOMEMLIMIT as bashible-apiserver's
// Deployment sets them, for the servers this process starts, then
// -server-env.
func useShippedRuntimeSettings(root string) error {
	for _, name := range runtimeSettings {
		if err := os.Unsetenv(name); err != nil {
			return err
		}
	}
	path := filepath.Join(root, "manifests/bashible-apiserver/deployment.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if slices.Contains(runtimeSettings, e.Name) {
					if err := os.Setenv(e.Name, e.Value); err != nil {
						return err
					}
				}
			}
		}
	}
	return setServerEnv()
}

func setServerEnv() error {
	for _, kv := range serverEnv {
		name, value, _ := strings.Cut(kv, "=")
		if err := os.Setenv(name, value); err != nil {
			return err
		}
	}
	return nil
}

// children are the pids of pid's child processes.
func children(pid int) ([]int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// saveProfile writes the server's heap profile (after a collection), its
// statistics (heap.txt, with the runtime's MemStats), smaps and smaps_rollup,
// and its status to dir.
func saveProfile(cp *controlplane.ControlPlane, server *stack.APIServer, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	heap, err := get(newClient(cp), server.URL()+"/debug/pprof/heap?gc=1")
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "heap.pb.gz"), heap, 0o644); err != nil {
		return err
	}
	stats, err := get(newClient(cp), server.URL()+"/debug/pprof/heap?debug=1")
	if err != nil {
		return fmt.Errorf("heap statistics: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "heap.txt"), stats, 0o644); err != nil {
		return err
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

// cpuTime is the user and system CPU time pid has used, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields follow its ')'.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
