// Package psi reads the kernel's memory Pressure Stall Information, the
// file /proc/pressure/memory:
//
//	some avg10=1.52 avg60=0.87 avg300=0.21 total=123456
//	full avg10=0.40 avg60=0.22 avg300=0.05 total=45678
//
// "some" is the share of time (percent) in which at least one task was
// stalled waiting for memory, "full" the share in which every non-idle
// task was, over the last 10, 60 and 300 seconds. A kernel without PSI
// (older than 4.20, built without CONFIG_PSI, or booted with psi=0) has no
// such file or refuses to read it; Read reports that as ErrUnavailable so
// that the agent can idle and say so instead of crash-looping.
package psi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// DefaultPath is where the kernel publishes memory pressure.
const DefaultPath = "/proc/pressure/memory"

// ErrUnavailable wraps the reason the kernel offers no memory PSI.
var ErrUnavailable = errors.New("memory pressure stall information is unavailable")

// Averages are one line of the file: stall percentages over 10, 60 and
// 300 seconds and the total stall time in microseconds.
type Averages struct {
	Avg10, Avg60, Avg300 float64
	Total                uint64
}

// Pressure is the whole file.
type Pressure struct {
	Some, Full Averages
}

// Read reads and parses path. A missing file, or one the kernel refuses to
// read with ENOTSUP/EOPNOTSUPP (PSI compiled in but switched off), is
// ErrUnavailable; anything else is an ordinary error.
func Read(path string) (Pressure, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP) {
			return Pressure{}, fmt.Errorf("%w: %v (a kernel from 4.20 with CONFIG_PSI=y, not booted with psi=0, provides it)", ErrUnavailable, err)
		}
		return Pressure{}, fmt.Errorf("reading memory pressure from %s: %w", path, err)
	}
	p, err := Parse(data)
	if err != nil {
		return Pressure{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse parses the file's content. Both the some and the full line are
// required (the memory file always has both); unknown fields are ignored,
// so that a kernel adding one does not stop the agent.
func Parse(data []byte) (Pressure, error) {
	var p Pressure
	var seenSome, seenFull bool
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		kind, rest, _ := strings.Cut(text, " ")
		var dst *Averages
		switch kind {
		case "some":
			dst, seenSome = &p.Some, true
		case "full":
			dst, seenFull = &p.Full, true
		default:
			return Pressure{}, fmt.Errorf("line %d: %q is neither a some nor a full line", line, text)
		}
		if err := parseAverages(rest, dst); err != nil {
			return Pressure{}, fmt.Errorf("line %d (%s): %w", line, kind, err)
		}
	}
	if !seenSome || !seenFull {
		return Pressure{}, fmt.Errorf("want a some and a full line, got %q", string(data))
	}
	return p, nil
}

func parseAverages(fields string, a *Averages) error {
	var seen10 bool
	for _, f := range strings.Fields(fields) {
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("field %q is not key=value", f)
		}
		var err error
		switch key {
		case "avg10":
			a.Avg10, err = parsePercent(value)
			seen10 = true
		case "avg60":
			a.Avg60, err = parsePercent(value)
		case "avg300":
			a.Avg300, err = parsePercent(value)
		case "total":
			a.Total, err = strconv.ParseUint(value, 10, 64)
		}
		if err != nil {
			return fmt.Errorf("field %s: %w", key, err)
		}
	}
	if !seen10 {
		return errors.New("no avg10 field")
	}
	return nil
}

func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) || v < 0 || v > 100 {
		return 0, fmt.Errorf("%s is not a percentage", s)
	}
	return v, nil
}
