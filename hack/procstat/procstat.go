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
	total := cpu(strconv.Itoa(pid))
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, child := range strings.Fields(string(children)) {
			total += cpu(child)
		}
	}
	return total
}

// cpu is utime+stime of one process, zero when it is gone.
func cpu(pid string) time.Duration {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
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
func Resident(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
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
