package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/node-manager/node-manager/internal/startuppages"
	"github.com/node-manager/node-manager/templates"
)

// WorkerArg, as the first argument, makes a binary that calls
// RunWorkerIfRequested a render worker.
const WorkerArg = "__node-manager-render-worker"

// Exit codes a worker uses to say why it stopped.
const (
	exitCPU     = 3 // SIGXCPU: the request's CPU time ran out
	exitRetired = 4 // a render ran out of time; its goroutine may still run
	exitSetup   = 5 // the setup frame was unusable
)

// RunWorkerIfRequested serves as a render worker, and exits, when the
// process was started as one (os.Args[1] == WorkerArg); otherwise it
// returns at once. Call it first thing in main (and in TestMain of a
// package whose tests use a Pool with the test binary as the worker),
// before anything reads flags or starts goroutines.
func RunWorkerIfRequested() {
	if len(os.Args) < 2 || os.Args[1] != WorkerArg {
		return
	}
	os.Exit(serve(os.Stdin, os.Stdout))
}

func serve(stdin io.Reader, stdout io.Writer) int {
	in, out := bufio.NewReader(stdin), bufio.NewWriter(stdout)
	frame, err := readFrame(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "render worker: read setup: %v\n", err)
		return exitSetup
	}
	var s setup
	if err := json.Unmarshal(frame, &s); err != nil {
		fmt.Fprintf(os.Stderr, "render worker: decode setup: %v\n", err)
		return exitSetup
	}
	if err := limitSelf(s); err != nil {
		fmt.Fprintf(os.Stderr, "render worker: %v\n", err)
		return exitSetup
	}
	engine, err := templates.NewEngine(s.Library)
	if err != nil {
		fmt.Fprintf(os.Stderr, "render worker: %v\n", err)
		return exitSetup
	}
	engine.Timeout = s.Timeout
	// Start-up is over: the pages of the executable it mapped (every
	// package initialiser the binary links) are given back, and rendering
	// maps again what it uses. They leave the page cache too: a process
	// maps what of its file the page cache holds around each page it
	// touches (64 KB at a time), so pages left there come back, as the
	// server's when the worker runs the server's binary. The next worker,
	// started on demand, reads its start-up from the disk again
	// (bashible-render-worker: 45 ms against 15 ms with its pages cached,
	// for 2 MiB less of it resident). A worker that cannot release them
	// only keeps them resident; it says nothing, since the first line of
	// its stderr is what the server reports should the worker die later.
	_, _ = startuppages.Release(startuppages.Options{DropCache: true})
	// Tell the server the worker is up, limits and all: a worker that
	// cannot start is told apart from a template that kills it.
	err = writeFrame(out, []byte{tagOutput})
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "render worker: write ready: %v\n", err)
		return exitSetup
	}

	var values any // the last values sent, decoded; each render gets a copy
	for {
		frame, err := readFrame(in)
		if errors.Is(err, io.EOF) {
			return 0 // the server closed the pipe: done
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "render worker: read request: %v\n", err)
			return exitSetup
		}
		var req request
		if err := json.Unmarshal(frame, &req); err != nil {
			fmt.Fprintf(os.Stderr, "render worker: decode request: %v\n", err)
			return exitSetup
		}
		if req.Values != nil {
			values = nil
			if err := json.Unmarshal(req.Values, &values); err != nil {
				fmt.Fprintf(os.Stderr, "render worker: decode values: %v\n", err)
				return exitSetup
			}
		}
		for _, t := range req.Templates {
			retire, err := renderOne(engine, s, t, values, out)
			if err != nil {
				fmt.Fprintf(os.Stderr, "render worker: %v\n", err)
				return exitSetup
			}
			if retire {
				return exitRetired
			}
		}
	}
}

// renderOne renders one template of a request within its own CPU budget
// and writes its response at once, so the server's deadline for it starts
// when the previous one was answered. retire says the worker must exit: a
// render that ran out of time may have left a goroutine running.
func renderOne(engine *templates.Engine, s setup, t templates.NamedText, values any, out *bufio.Writer) (retire bool, err error) {
	if err := allowCPU(s.CPU); err != nil {
		return false, err
	}
	start := time.Now()
	// A copy, so that what one template changes (sprig's set and unset
	// change maps in place) is not seen by the next.
	text, renderErr := engine.Render(t.Name, t.Text, deepCopy(values))
	retire = time.Since(start) >= s.Timeout
	if renderErr != nil {
		tag := tagError
		if retire {
			tag = tagErrorRetire
		}
		err = writeFrame(out, []byte{tag}, encodeError(t.Name, renderErr))
	} else {
		err = writeFrame(out, []byte{tagOutput}, []byte(text))
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		return false, fmt.Errorf("write response: %w", err)
	}
	return retire, nil
}

// limitSelf applies the worker's limits before it reads any template:
// a data limit the kernel enforces, a soft Go memory limit below it so the
// collector works harder before the hard limit is reached, one thread of
// Go code, and an OOM score that makes the kernel pick a worker before the
// server if the container runs out of memory anyway.
//
// The data limit is RLIMIT_DATA, which counts private writable mappings
// (RLIMIT_AS would also count the address space the Go runtime reserves
// and never touches, gigabytes). It is set to what the process has mapped
// so far plus s.Memory: a Go binary maps far more writable memory at start
// than it touches (the server's binary about 125 MiB, of which under
// 10 MiB), so s.Memory is what a render may add, and what the worker may
// really use is s.Memory plus the few MiB its start-up touched.
func limitSelf(s setup) error {
	runtime.GOMAXPROCS(1)
	if s.Memory > 0 {
		base, err := mappedData()
		if err != nil {
			return err
		}
		lim := syscall.Rlimit{Cur: uint64(base + s.Memory), Max: uint64(base + s.Memory)}
		if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &lim); err != nil {
			return fmt.Errorf("set the memory limit: %w", err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		debug.SetMemoryLimit(int64(ms.Sys-ms.HeapReleased) + s.Memory*3/4)
	}
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0) // best effort
	// Past RLIMIT_CPU's soft limit the kernel sends SIGXCPU, which the Go
	// runtime would otherwise ignore.
	xcpu := make(chan os.Signal, 1)
	signal.Notify(xcpu, syscall.SIGXCPU)
	go func() {
		<-xcpu
		fmt.Fprintln(os.Stderr, "render worker: CPU time limit reached")
		os.Exit(exitCPU)
	}()
	return nil
}

// mappedData is the process's VmData: what RLIMIT_DATA counts.
func mappedData() (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read the memory in use: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmData:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read the memory in use: VmData %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("read the memory in use: /proc/self/status has no VmData")
}

// allowCPU sets RLIMIT_CPU's soft limit to the CPU time used so far plus
// budget, so that this request, and no earlier one, is charged. The hard
// limit stays where it was (an unprivileged process cannot raise it again).
func allowCPU(budget time.Duration) error {
	if budget <= 0 {
		return nil
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return fmt.Errorf("read CPU time: %w", err)
	}
	used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CPU, &lim); err != nil {
		return fmt.Errorf("read the CPU limit: %w", err)
	}
	// RLIMIT_CPU counts whole seconds; round up so a request gets at
	// least its budget.
	lim.Cur = uint64((used + budget + time.Second - 1) / time.Second)
	if lim.Max != ^uint64(0) && lim.Cur > lim.Max {
		lim.Cur = lim.Max
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &lim); err != nil {
		return fmt.Errorf("set the CPU limit: %w", err)
	}
	return nil
}

func encodeError(name string, err error) []byte {
	var re *templates.RenderError
	if !errors.As(err, &re) {
		re = &templates.RenderError{Template: name, Message: err.Error()}
	}
	e := *re
	if len(e.Message) > maxErrorMessage {
		e.Message = e.Message[:maxErrorMessage] + "..."
	}
	data, _ := json.Marshal(e)
	return data
}

// deepCopy copies decoded JSON.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}
