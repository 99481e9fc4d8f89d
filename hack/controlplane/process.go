package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// process is one child of the control plane: its command, its log file and
// the ports it listens on.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	ports   []int
	done    chan struct{}
	waitErr error
	// stopping is set before a deliberate stop, so the exit is not reported
	// as a failure.
	stopping atomic.Bool
}

// startProcess starts binary with args, sending stdout and stderr to
// <logDir>/<name>.log (appended to). The child gets its own process group (so a stop
// reaches anything it forks) and is killed by the kernel if we die first.
// Its environment is this process's with env (NAME=VALUE) added.
func startProcess(name, binary string, args, env []string, logDir string, ports ...int) (*process, error) {
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("%s: binary %s not found: %w (run 'make tools' to build it)", name, binary, err)
	}
	// A component started again under the same name (a restarted
	// replica) keeps its earlier life's log above the new one.
	logPath := filepath.Join(logDir, name+".log")
	var environ []string // nil: this process's
	if len(env) > 0 {
		environ = append(os.Environ(), env...) // the last of a name wins
	}
	return spawn(name, binary, args, environ, logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, ports)
}

// spawn starts the process with environ (nil: this process's environment),
// opening its log with flags.
func spawn(name, binary string, args, environ []string, logPath string, flags int, ports []int) (*process, error) {
	logFile, err := os.OpenFile(logPath, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: open log file: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = environ
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, binary, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, ports: ports, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// again starts the same command on the same ports once more, appending to
// the same log, as a supervisor restarts a component.
func (p *process) again() (*process, error) {
	return spawn(p.name, p.cmd.Path, p.cmd.Args[1:], p.cmd.Env, p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, p.ports)
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs
// the group and waits for the process to be reaped.
func (p *process) stop(grace time.Duration) {
	p.stopping.Store(true)
	if done, _ := p.exited(); done {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything the child forked into its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// pid is the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// failure wraps err with the process's log tail, so whoever reads the error
// sees why the component failed without hunting for the file.
func (p *process) failure(err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v\n--- last lines of %s ---\n%s\n--- end of %s log ---", p.name, err, p.logPath, p.tail(40), p.name)
	return errors.New(b.String())
}

// Process is a program started next to the control plane (a node-manager
// component under test). The control plane stops it on Stop if nobody did.
type Process struct{ p *process }

// StartProcess starts binary with args, logging to <Dir>/<name>.log, and
// reports it on Failed if it exits before it is stopped.
func (cp *ControlPlane) StartProcess(name, binary string, args []string, ports ...int) (*Process, error) {
	return cp.StartProcessWithEnv(name, binary, args, nil, ports...)
}

// StartProcessWithEnv is StartProcess with env (NAME=VALUE) added to the
// process's environment.
func (cp *ControlPlane) StartProcessWithEnv(name, binary string, args, env []string, ports ...int) (*Process, error) {
	p, err := startProcess(name, binary, args, env, cp.dir, ports...)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	go cp.watch(p)
	return &Process{p: p}, nil
}

// Stop stops the process (SIGTERM, then SIGKILL after 15 seconds).
func (p *Process) Stop() { p.p.stop(15 * time.Second) }

// Kill stops the process at once with SIGKILL, as a crash would.
func (p *Process) Kill() {
	p.p.stopping.Store(true)
	_ = syscall.Kill(-p.p.pid(), syscall.SIGKILL)
	<-p.p.done
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool { done, _ := p.p.exited(); return done }

// PID is the process id.
func (p *Process) PID() int { return p.p.pid() }

// Tail is the last n lines of the process's log.
func (p *Process) Tail(n int) string { return p.p.tail(n) }

// Failure wraps err with the process's log tail.
func (p *Process) Failure(err error) error { return p.p.failure(err) }
