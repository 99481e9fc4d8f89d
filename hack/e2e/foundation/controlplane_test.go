package foundation

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/controlplane"
)

// leftovers lists processes still alive, ports still bound and the
// directory if it still exists after a control plane stopped.
func leftovers(procs []controlplane.ProcessInfo, dir string) []string {
	var out []string
	for _, p := range procs {
		if err := syscall.Kill(p.PID, 0); !errors.Is(err, syscall.ESRCH) {
			out = append(out, fmt.Sprintf("process %s (pid %d) is still running", p.Name, p.PID))
		}
		if err := syscall.Kill(-p.PID, 0); !errors.Is(err, syscall.ESRCH) {
			out = append(out, fmt.Sprintf("process group of %s (pgid %d) still has members", p.Name, p.PID))
		}
		for _, port := range p.Ports {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				out = append(out, fmt.Sprintf("port %d of %s is still bound: %v", port, p.Name, err))
				continue
			}
			_ = l.Close()
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		out = append(out, fmt.Sprintf("directory %s still exists", dir))
	}
	return out
}

func TestStopLeavesNothingBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	other, err := controlplane.Start(ctx, controlplane.Config{})
	if err != nil {
		t.Fatal(err)
	}
	procs, dir := other.Processes(), other.Dir()
	if len(procs) != 3 {
		t.Fatalf("want etcd, kube-apiserver and kube-controller-manager, got %+v", procs)
	}
	for _, p := range procs {
		if err := syscall.Kill(p.PID, 0); err != nil {
			t.Fatalf("%s (pid %d) should be running: %v", p.Name, p.PID, err)
		}
	}
	if err := other.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if leaks := leftovers(procs, dir); len(leaks) > 0 {
		t.Fatalf("left behind after Stop: %v", leaks)
	}
	if err := other.Stop(); err != nil {
		t.Fatalf("a second Stop must be harmless: %v", err)
	}
}

func TestFailedStartCleansUpAndExplains(t *testing.T) {
	// A bin directory without kube-controller-manager: etcd and
	// kube-apiserver start, then the start fails. Nothing may survive.
	bin := t.TempDir()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := os.Symlink(filepath.Join(f.Root, "bin", name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	workDir := filepath.Join(t.TempDir(), "cp")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := controlplane.Start(ctx, controlplane.Config{BinDir: bin, Dir: workDir})
	if err == nil {
		t.Fatal("start without kube-controller-manager succeeded")
	}
	for _, want := range []string{"kube-controller-manager", "make tools"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q should mention %q", err, want)
		}
	}
	if pids := processesMentioning(t, workDir); len(pids) > 0 {
		t.Fatalf("processes of the failed start are still running: %v", pids)
	}
}

func TestComponentCrashIsReportedWithLogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	other, err := controlplane.Start(ctx, controlplane.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Stop() }()
	var kcm controlplane.ProcessInfo
	for _, p := range other.Processes() {
		if p.Name == "kube-controller-manager" {
			kcm = p
		}
	}
	if err := syscall.Kill(kcm.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-other.Failed():
		for _, want := range []string{"kube-controller-manager", "exited unexpectedly", "last lines of"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("failure report %q should mention %q", err, want)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a killed kube-controller-manager was not reported")
	}
}

// processesMentioning lists pids whose command line contains s.
func processesMentioning(t *testing.T, s string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestMakeRun runs the `make run` command as a user would: it waits for the
// stack to say it is ready, uses the printed kubeconfig with kubectl, then
// presses Ctrl-C and checks the stack stopped cleanly and removed the
// kubeconfig.
func TestMakeRun(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "localstack")
	build := exec.Command("go", "build", "-o", exe, "./hack/cmd/localstack")
	build.Dir = f.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build localstack: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cmd := exec.Command(exe, "--kubeconfig", kubeconfig)
	cmd.Dir = f.Root
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Whatever happens, stop the stack the way a user would, so even a
	// failing test leaves nothing behind; kill it only if Ctrl-C is ignored.
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
		}
	}()

	// The reader hands over what it has read so far with each message, so
	// the test never reads the buffer while the reader writes it.
	type progress struct {
		output string
		dir    string // set once the stack says it is ready
		done   bool   // the stack closed its output
	}
	updates := make(chan progress, 64)
	go func() {
		var output strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			output.WriteString(line + "\n")
			u := progress{output: output.String()}
			if dir, ok := strings.CutPrefix(line, "Logs are in "); ok {
				u.dir = strings.TrimSuffix(dir, ". Press Ctrl-C to stop.")
			}
			updates <- u
		}
		_, _ = io.Copy(io.Discard, stdout)
		updates <- progress{output: output.String(), done: true}
	}()
	var dir, printed string
	timeout := time.After(3 * time.Minute)
	for dir == "" {
		select {
		case u := <-updates:
			printed = u.output
			if u.done {
				t.Fatalf("localstack exited before it was ready:\n%s\nstderr:\n%s", printed, stderr.String())
			}
			dir = u.dir
		case <-timeout:
			t.Fatalf("localstack did not become ready:\n%s", printed)
		}
	}
	for _, want := range []string{"export KUBECONFIG=" + kubeconfig, "master", "worker", "TYPE", "UPTODATE"} {
		if !strings.Contains(printed, want) {
			t.Errorf("make run output should show %q:\n%s", want, printed)
		}
	}

	out, err := exec.Command(filepath.Join(f.Root, "bin", "kubectl"), "--kubeconfig", kubeconfig, "get", "ng", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get ng with the printed kubeconfig: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); strings.Join(got, " ") != "nodegroup.deckhouse.io/master nodegroup.deckhouse.io/worker" {
		t.Errorf("kubectl get ng -o name = %q", got)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the deferred stop
		if err != nil {
			t.Fatalf("make run should exit 0 on Ctrl-C: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("make run did not stop within a minute of Ctrl-C")
	}
	if _, err := os.Stat(kubeconfig); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the kubeconfig must be removed on exit, stat: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the control plane directory %s must be removed on exit", dir)
	}
	if pids := processesMentioning(t, dir); len(pids) > 0 {
		t.Errorf("processes of make run are still running: %v", pids)
	}
}
