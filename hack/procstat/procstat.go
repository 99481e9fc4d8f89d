// Package procstat reads what a process costs from /proc, for tests and
// benchmarks that measure it: the CPU time of a process and its children,
// and its resident memory.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times: 100 on Linux.
const userHZ = 100

// TreeCPU is the user and system CPU time used so far by process pid and
// by its live children (a render worker's time counts to its server). A
// child that has exited meanwhile counts nothing.
func TreeCPU(pid int) time.Duration {
	total := CPU(pid)
	for _, child := range Children(pid) {
		total += CPU(child)
	}
	return total
}

// Children are the pids of process pid's live child processes.
func Children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, child := range strings.Fields(string(children)) {
			if c, err := strconv.Atoi(child); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// CPU is the user and system CPU time process pid has used, zero when it
// is gone.
func CPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; the fields after it may not.
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 || end+2 > len(data) {
		return 0
	}
	fields := strings.Fields(string(data[end+2:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / userHZ
}

// Resident is process pid's resident memory (VmRSS) in bytes.
func Resident(pid int) (int64, error) { return Memory(pid, "status", "VmRSS") }

// Memory is a field of /proc/<pid>/<file> that the kernel gives in kB
// ("status": VmRSS, RssAnon, RssFile; "smaps_rollup": Pss, ...), in bytes.
func Memory(pid int, file, field string) (int64, error) {
	path := fmt.Sprintf("/proc/%d/%s", pid, file)
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", path, field, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s has no %s", path, field)
}

// Tree is the memory of a process and its children (a server and its
// render workers).
type Tree struct {
	// Children are the children's pids, ChildrenRSS their resident memory
	// together (a child that stopped meanwhile counts nothing).
	Children    []int
	ChildrenRSS int64
	// Total is the resident memory of the process and its children
	// together: proportional set sizes when it has children, so that pages
	// they share (a binary two workers run) count once; VmRSS otherwise.
	Total int64
}

// MemoryTree reads Tree of process pid.
func MemoryTree(pid int) (Tree, error) {
	t := Tree{Children: Children(pid)}
	for _, c := range t.Children {
		v, _ := Resident(c)
		t.ChildrenRSS += v
	}
	if len(t.Children) == 0 {
		var err error
		t.Total, err = Resident(pid)
		return t, err
	}
	for _, p := range append([]int{pid}, t.Children...) {
		v, err := Memory(p, "smaps_rollup", "Pss")
		if err != nil && p == pid {
			return t, err
		}
		t.Total += v
	}
	return t, nil
}

// Test is the part of testing.TB that MustResident needs.
type Test interface {
	Helper()
	Fatal(args ...any)
}

// MustResident is Resident for a test, which fails when /proc cannot say.
func MustResident(t Test, pid int) int64 {
	t.Helper()
	n, err := Resident(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
