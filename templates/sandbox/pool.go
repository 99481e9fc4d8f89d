// Package sandbox renders untrusted templates (NodeGroupConfiguration
// content) in worker processes that are bounded in CPU time and memory and
// are really stopped when they exceed either: a template that spins or
// allocates without end costs one worker, which is killed and replaced,
// never the server.
//
// A worker is a binary started with WorkerArg as its first argument (see
// RunWorkerIfRequested): bashible-render-worker, which links little else,
// or the server's own binary re-executed. It limits itself before it
// reads any template: RLIMIT_DATA and a Go memory limit for memory,
// RLIMIT_CPU per request, one thread of Go code. The server adds a
// wall-clock deadline after which it kills the worker. Workers are long
// lived and reused, so a render costs a round trip over a pipe, not a
// process start.
package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/templates"
)

// Defaults for a Config's zero fields.
const (
	DefaultWorkers = 2
	DefaultMemory  = 128 << 20
	// killGrace is how long past Timeout the server waits before it kills
	// a worker, so the engine's own deadline (which names the line) fires
	// first when it can.
	killGrace = 2 * time.Second
)

// Config configures a Pool.
type Config struct {
	// Library holds the library templates (name → text) every render may
	// include.
	Library map[string]string
	// Workers is how many renders may run at once, each in its own process.
	Workers int
	// Timeout is the wall-clock time one template may take, and CPU the
	// CPU time; zero means templates.DefaultTimeout for both.
	Timeout, CPU time.Duration
	// Memory is the most a worker process may use, in bytes (RLIMIT_DATA).
	Memory int64
	// Command starts a worker; nil means this executable with WorkerArg
	// (Command(os.Executable())).
	Command func() *exec.Cmd
	// IdleTimeout stops a worker left idle for longer (zero means
	// DefaultIdleTimeout, negative never): a worker is a process of its
	// own, with its own copy of the executable's pages, and most renders
	// need none (a NodeGroupConfiguration without template actions never
	// reaches the sandbox).
	IdleTimeout time.Duration
}

// DefaultIdleTimeout is how long an idle worker is kept for the next
// render: a burst of changes (a kubectl apply of many objects) reuses its
// workers, and between bursts none is left running. Starting one again
// takes about 0.05 s.
const DefaultIdleTimeout = 10 * time.Second

// Pool renders templates in worker processes. It is safe for concurrent
// use; Render blocks while every worker is busy.
type Pool struct {
	cfg    Config
	setup  []byte
	slots  chan struct{}
	closed atomic.Bool
	mu     sync.Mutex
	live   map[*worker]struct{}
	// idle are the workers waiting for a render, the most recently used
	// last; reaper, while armed, stops those idle past IdleTimeout.
	idle   []*worker
	reaper *time.Timer
	// Started counts worker processes started, for tests and metrics.
	Started atomic.Int64
}

// New returns a pool; workers start on first use.
func New(cfg Config) (*Pool, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = templates.DefaultTimeout
	}
	if cfg.CPU <= 0 {
		cfg.CPU = cfg.Timeout
	}
	if cfg.Memory <= 0 {
		cfg.Memory = DefaultMemory
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Command == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("render sandbox: find this executable to run workers: %w", err)
		}
		cfg.Command = Command(exe)
	}
	setupFrame, err := json.Marshal(setup{Library: cfg.Library, Memory: cfg.Memory, CPU: cfg.CPU, Timeout: cfg.Timeout})
	if err != nil {
		return nil, fmt.Errorf("render sandbox: encode setup: %w", err)
	}
	p := &Pool{cfg: cfg, setup: setupFrame, slots: make(chan struct{}, cfg.Workers), live: map[*worker]struct{}{}}
	return p, nil
}

// Command starts workers from the executable at path: a binary whose main
// calls RunWorkerIfRequested first.
func Command(path string) func() *exec.Cmd {
	return func() *exec.Cmd { return exec.Command(path, WorkerArg) }
}

// Limits are the pool's effective limits.
func (p *Pool) Limits() (timeout, cpu time.Duration, memory int64) {
	return p.cfg.Timeout, p.cfg.CPU, p.cfg.Memory
}

// Close stops every worker, busy ones too: their renders fail.
func (p *Pool) Close() {
	p.closed.Store(true)
	p.mu.Lock()
	live := make([]*worker, 0, len(p.live))
	for w := range p.live {
		live = append(live, w)
	}
	p.mu.Unlock()
	for _, w := range live {
		_ = w.cmd.Process.Kill()
	}
	p.stopIdle()
}

// stopIdle stops every idle worker.
func (p *Pool) stopIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	if p.reaper != nil {
		p.reaper.Stop()
		p.reaper = nil
	}
	p.mu.Unlock()
	for _, w := range idle {
		p.stop(w)
	}
}

// Idle is how many workers wait for a render.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// stop ends a worker and forgets it.
func (p *Pool) stop(w *worker) {
	w.stop()
	p.mu.Lock()
	delete(p.live, w)
	p.mu.Unlock()
}

// Render renders text, named name in errors, with data in a worker. data
// must survive a JSON round trip unchanged (the render context's values
// do: they are decoded JSON). A template error is a *templates.RenderError
// as the in-process engine reports it; a worker stopped at a limit is a
// *templates.RenderError that says which limit.
func (p *Pool) Render(name, text string, data any) (string, error) {
	values, err := json.Marshal(data)
	if err != nil {
		return "", &templates.RenderError{Template: name, Message: fmt.Sprintf("encode the render context: %v", err)}
	}
	outs, errs := p.RenderJSON([]templates.NamedText{{Name: name, Text: text}}, values)
	return outs[0], errs[0]
}

// RenderJSON renders each of texts with the data given as its JSON
// encoding (templates.Untrusted), in one request to one worker. Each
// template has its own limits, as in Render: one that a worker is stopped
// for fails alone, and the templates after it render in a new worker.
func (p *Pool) RenderJSON(texts []templates.NamedText, values []byte) ([]string, []error) {
	outs, errs := make([]string, len(texts)), make([]error, len(texts))
	p.slots <- struct{}{}
	defer func() { <-p.slots }()

	// A worker that died between requests (or was retired) is replaced
	// once; a second failure is the next template's.
	for next, attempt := 0, 0; next < len(texts); {
		w, err := p.get()
		if err != nil {
			for i := next; i < len(texts); i++ {
				errs[i] = &templates.RenderError{Template: texts[i].Name, Message: err.Error()}
			}
			break
		}
		answered, retire, err := w.render(texts[next:], values, p.cfg, outs[next:], errs[next:])
		if retire || err != nil {
			p.stop(w)
		} else {
			p.put(w)
		}
		next += answered
		if answered > 0 {
			attempt = 0
		}
		var died *workerDied
		switch {
		case err == nil:
		case errors.As(err, &died) && died.beforeRequest && attempt == 0:
			// Nothing of texts[next] ran: the worker had stopped before
			// the request, or retired after the template before it.
			attempt++
		default:
			msg := err.Error()
			if died != nil && p.closed.Load() {
				msg = "the render sandbox is shut down"
			}
			// The template the worker was rendering when it stopped.
			errs[next] = &templates.RenderError{Template: texts[next].Name, Message: msg}
			next++
		}
	}
	return outs, errs
}

func (p *Pool) get() (*worker, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, nil
	}
	p.mu.Unlock()
	if p.closed.Load() {
		return nil, errors.New("the render sandbox is shut down")
	}
	return p.start()
}

func (p *Pool) put(w *worker) {
	p.mu.Lock()
	if p.closed.Load() || len(p.idle) >= p.cfg.Workers {
		p.mu.Unlock()
		p.stop(w)
		return
	}
	w.idleSince = time.Now()
	p.idle = append(p.idle, w)
	if p.cfg.IdleTimeout > 0 && p.reaper == nil {
		p.reaper = time.AfterFunc(p.cfg.IdleTimeout, p.reap)
	}
	p.mu.Unlock()
}

// reap stops the workers idle for IdleTimeout, and is armed again for the
// next one to reach it while any is left.
func (p *Pool) reap() {
	p.mu.Lock()
	now := time.Now()
	var stale []*worker
	kept := p.idle[:0]
	for _, w := range p.idle {
		if now.Sub(w.idleSince) >= p.cfg.IdleTimeout {
			stale = append(stale, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	p.reaper = nil
	if len(kept) > 0 && !p.closed.Load() {
		p.reaper = time.AfterFunc(p.cfg.IdleTimeout-now.Sub(kept[0].idleSince), p.reap)
	}
	p.mu.Unlock()
	for _, w := range stale {
		p.stop(w)
	}
}

// worker is one worker process.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *headBuffer
	// lastValues are the values the worker holds.
	lastValues []byte
	// idleSince is when it last went idle (Pool.idle).
	idleSince  time.Time
	waitOnce   sync.Once
	waitErr    error
	stderrDone chan struct{}
}

func (p *Pool) start() (*worker, error) {
	cmd := p.cfg.Command()
	// Only what the runtime needs: the server's environment is none of a
	// template's business.
	cmd.Env = []string{"GOMAXPROCS=1", "GOTRACEBACK=single"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start a render worker: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start a render worker: %w", err)
	}
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start a render worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a render worker %s: %w", cmd.Path, err)
	}
	p.Started.Add(1)
	w := &worker{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), stderr: &headBuffer{max: 2 << 10}, stderrDone: make(chan struct{})}
	go func() {
		_, _ = io.Copy(w.stderr, stderrPipe)
		close(w.stderrDone)
	}()
	p.mu.Lock()
	p.live[w] = struct{}{}
	p.mu.Unlock()
	if p.closed.Load() { // Close ran while this one started
		p.stop(w)
		return nil, errors.New("the render sandbox is shut down")
	}
	if err := writeFrame(w.stdin, p.setup); err != nil {
		p.stop(w)
		return nil, fmt.Errorf("start a render worker: send setup: %w (%s)", err, firstLine(w.stderr.String()))
	}
	timer := time.AfterFunc(p.cfg.Timeout+killGrace, func() { _ = w.cmd.Process.Kill() })
	ready, err := readFrame(w.stdout)
	timer.Stop()
	if err != nil || len(ready) != 1 || ready[0] != tagOutput {
		p.stop(w)
		waitErr := w.wait()
		return nil, fmt.Errorf("a render worker did not start (%v): %s; if it ran out of memory, raise --render-worker-memory",
			waitErr, firstLine(w.stderr.String()))
	}
	return w, nil
}

// Check starts a worker and renders a trivial template, so a pool that
// cannot work (the executable cannot run as a worker, or the memory limit
// is too small for it to start) is found at start-up, not at the first
// NodeGroupConfiguration. It leaves no worker running: most clusters'
// NodeGroupConfigurations are plain scripts that never need one. Call it
// before the pool's first render.
func (p *Pool) Check() error {
	out, err := p.Render("check", "{{ range 2 }}ok{{ end }}", map[string]any{})
	p.stopIdle()
	if err != nil {
		return fmt.Errorf("render sandbox: %w", err)
	}
	if out != "okok" {
		return fmt.Errorf("render sandbox: a worker rendered %q, want %q", out, "okok")
	}
	return nil
}

// render sends one request for texts and reads the responses into outs
// and errs as they come: answered is how many templates were answered.
// The worker is killed when one template takes longer than cfg.Timeout
// (plus a grace period); err, when set, is why the worker stopped during
// texts[answered], or could not be used at all. retire says the worker
// must not be used again.
func (w *worker) render(texts []templates.NamedText, values []byte, cfg Config, outs []string, errs []error) (answered int, retire bool, err error) {
	req := request{Templates: texts}
	if !bytes.Equal(values, w.lastValues) {
		req.Values = values
	}
	frame, err := json.Marshal(req)
	if err != nil {
		return 0, true, err
	}
	w.lastValues = values
	if err := writeFrame(w.stdin, frame); err != nil {
		return 0, true, w.died(cfg, true, false)
	}
	for i, t := range texts {
		var killed atomic.Bool
		timer := time.AfterFunc(cfg.Timeout+killGrace, func() {
			killed.Store(true)
			_ = w.cmd.Process.Kill()
		})
		frame, readErr := readFrame(w.stdout)
		// The kill raced the answer: use the answer, not the worker.
		raced := !timer.Stop() || killed.Load()
		if readErr != nil {
			return i, true, w.died(cfg, false, killed.Load())
		}
		var done bool
		outs[i], errs[i], done, err = response(t.Name, frame, cfg)
		if err != nil {
			return i, true, err
		}
		if done || raced {
			return i + 1, true, nil
		}
	}
	return len(texts), false, nil
}

// response decodes a worker's answer for the template named name; done
// says the worker retired after it.
func response(name string, frame []byte, cfg Config) (out string, renderErr error, done bool, err error) {
	if len(frame) == 0 {
		return "", nil, false, errors.New("the render worker sent an empty response")
	}
	switch frame[0] {
	case tagOutput:
		return string(frame[1:]), nil, false, nil
	case tagError, tagErrorRetire:
		var re templates.RenderError
		if err := json.Unmarshal(frame[1:], &re); err != nil {
			return "", nil, false, fmt.Errorf("the render worker sent an unreadable error: %w", err)
		}
		retire := frame[0] == tagErrorRetire
		if retire && re.Line == 0 {
			// The engine gave up on a call still running; the worker
			// exits, which stops it.
			re.Message = fmt.Sprintf("rendering took longer than %s and was stopped", cfg.Timeout)
		}
		return "", &re, retire, nil
	default:
		return "", nil, false, fmt.Errorf("the render worker sent an unknown response %d", frame[0])
	}
}

// workerDied says why a worker stopped during a request.
type workerDied struct {
	beforeRequest bool
	msg           string
}

func (e *workerDied) Error() string { return e.msg }

// died waits for the (dead or killed) worker and says why it stopped.
func (w *worker) died(cfg Config, beforeRequest, killed bool) error {
	_ = w.cmd.Process.Kill()
	waitErr := w.wait()
	stderr := w.stderr.String()
	var exit *exec.ExitError
	code := -1
	if errors.As(waitErr, &exit) {
		code = exit.ExitCode()
	}
	e := &workerDied{beforeRequest: beforeRequest}
	switch {
	case killed:
		e.msg = fmt.Sprintf("rendering took longer than %s and was stopped", cfg.Timeout)
	case code == exitCPU:
		e.msg = fmt.Sprintf("rendering took more than %s of CPU and was stopped", cfg.CPU)
	case outOfMemory(stderr):
		e.msg = fmt.Sprintf("rendering used more than %d MiB and was stopped", cfg.Memory>>20)
	case code == exitRetired:
		e.beforeRequest = true // it retired after its last request; nothing of this one ran
		e.msg = "the render worker had stopped"
	default:
		e.msg = fmt.Sprintf("the render worker stopped unexpectedly (%v): %s", waitErr, firstLine(stderr))
	}
	if !e.beforeRequest {
		klog.V(2).InfoS("Render worker stopped", "pid", w.cmd.Process.Pid, "reason", e.msg, "stderr", firstLine(stderr))
	}
	return e
}

func (w *worker) wait() error {
	w.waitOnce.Do(func() {
		<-w.stderrDone
		w.waitErr = w.cmd.Wait()
	})
	return w.waitErr
}

// stop ends the worker: closing its stdin ends an idle worker; a busy one
// is killed.
func (w *worker) stop() {
	_ = w.stdin.Close()
	_ = w.cmd.Process.Kill()
	_ = w.wait()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// headBuffer keeps the first max bytes written to it: a worker says why
// it stops first (the runtime's "fatal error: ..." comes before its
// traceback), and what follows may be long.
type headBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *headBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.buf); room > 0 {
		t.buf = append(t.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// outOfMemory reports whether a dead worker's last words say an allocation
// failed: the Go runtime's "out of memory", or ENOMEM from a lower-level
// allocator (the race detector's ThreadSanitizer reports "failed to
// allocate ... (errno: 12)" when RLIMIT_DATA refuses its shadow memory).
func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory") ||
		(strings.Contains(stderr, "failed to allocate") && strings.Contains(stderr, "errno: 12"))
}
