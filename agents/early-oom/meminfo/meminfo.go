// Package meminfo reads MemAvailable from /proc/meminfo: the kernel's
// estimate of how much memory can be given to new work without swapping.
// It is early-oom's second trigger, a floor under which the node acts even
// when the pressure averages have not caught up yet.
package meminfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DefaultPath is the kernel's file.
const DefaultPath = "/proc/meminfo"

// ReadAvailable is MemAvailable in bytes from the meminfo file at path.
func ReadAvailable(path string) (int64, error) { return read(path, "MemAvailable") }

// ReadTotal is MemTotal in bytes from the meminfo file at path: the RAM
// that settings such as the MemAvailable floor are bounded by.
func ReadTotal(path string) (int64, error) { return read(path, "MemTotal") }

func read(path, key string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", key, err)
	}
	v, err := parse(data, key)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ParseAvailable finds the line "MemAvailable:   123456 kB" and returns
// its value in bytes.
func ParseAvailable(data []byte) (int64, error) { return parse(data, "MemAvailable") }

func parse(data []byte, key string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), key+":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s line %q is not \"<number> kB\"", key, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb < 0 || kb > 1<<53 {
			return 0, fmt.Errorf("%s %q is not a size in kB", key, fields[0])
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no %s line (kernels from 3.14 have MemAvailable)", key)
}
