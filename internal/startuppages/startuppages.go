// Package startuppages gives back the pages of a process's own executable
// that only its start-up touched.
//
// A Go server's start-up runs the initialisers of every package it links,
// parses flags and builds its serving stack: code and tables spread over
// the whole executable. The kernel maps 64 KB around every page touched
// (fault-around), so bashible-apiserver held about 60 MiB of its binary's
// pages once started, of which serving goes on to use about 35 (measured by
// `make bench`, docs/development/benchmarks/bench.md). Those pages are
// clean copies of the file: under memory pressure the kernel drops them
// and reads them again when used. But while they are mapped they count in
// the process's resident memory, and mapped executable pages are the last
// the kernel reclaims.
//
// Release unmaps them once start-up is over, as reclaim would: madvise
// MADV_DONTNEED on the executable's read-only private mappings. Whatever
// the process runs afterwards is mapped again on its first use.
//
// Unmapping alone gives back less than it seems: the pages stay in the page
// cache, and fault-around maps, with each page faulted, the neighbours of
// its 64 KB window that the page cache holds, so serving brought back
// 34-47 MiB of the 60. Every released mapping gets MADV_RANDOM first, so a
// later fault of read-only data reads that page alone rather than a
// readahead window (the kernel still reads a window around a fault of
// code). With Options.DropCache, Release also drops the file's pages no
// process maps from the page cache (posix_fadvise POSIX_FADV_DONTNEED):
// the process then maps what it uses, 23-32 MiB, and
// the memory the dropped pages held is free, not merely out of the
// process's count. The cost is a read from the disk for code and data
// first used after start-up. Only mappings
// no page of which was ever copied on write are released (smaps counts
// no anonymous page in them, resident or swapped out): for such a page,
// MADV_DONTNEED would bring back the file's content instead of the
// process's (a read-only mapping of a binary relocated at load, RELRO).
package startuppages

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Region is one read-only private mapping of the executable.
type Region struct {
	Start, End uint64
	// Resident is what it had resident before release, in bytes.
	Resident int64
}

// Options tell Release what to give back besides the mapped pages.
type Options struct {
	// DropCache also drops the executable's pages that no process maps
	// from the page cache, so that what the process runs afterwards maps
	// only the pages in use (see the package documentation). A process
	// started from the file later reads what it uses from the disk again.
	// Every process of the file has to: the pages one leaves in the page
	// cache are mapped by the others' faults around theirs.
	DropCache bool
}

// Released is what Release gave back.
type Released struct {
	Regions []Region
	// Resident is the regions' resident bytes before release.
	Resident int64
	// DroppedCache says that the file's unmapped pages were dropped from
	// the page cache.
	DroppedCache bool
}

// plan reads smaps (the format of /proc/<pid>/smaps) and returns the
// read-only, private mappings of the file exe that no copy-on-write ever
// touched (Anonymous: 0 kB and Swap: 0 kB).
func plan(smaps io.Reader, exe string) ([]Region, error) {
	var regions []Region
	var cur *Region
	// zero are the fields that must read 0 kB for the mapping to be
	// released: a mapping whose field is missing or unreadable is kept.
	zero := map[string]bool{}
	flush := func() {
		if cur != nil && zero["Anonymous"] && zero["Swap"] {
			regions = append(regions, *cur)
		}
		cur, zero = nil, map[string]bool{}
	}
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if key, ok := strings.CutSuffix(fields[0], ":"); ok {
			// A field of the mapping above, most in kB.
			if cur == nil || len(fields) < 2 {
				continue
			}
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			switch {
			case key == "Rss" && err == nil:
				cur.Resident = kb << 10
			case key == "Anonymous" || key == "Swap":
				zero[key] = err == nil && kb == 0
			}
			continue
		}
		// A mapping's first line: range perms offset dev inode [path].
		flush()
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe {
			continue
		}
		perms := fields[1]
		if len(perms) != 4 || perms[1] == 'w' || perms[3] != 'p' {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("smaps: unreadable range %q", fields[0])
		}
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			return nil, fmt.Errorf("smaps: unreadable range %q", fields[0])
		}
		cur = &Region{Start: s, End: e}
	}
	flush()
	return regions, sc.Err()
}

// executable is the path of this process's executable as /proc/self/maps
// names it.
func executable() (string, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return "", fmt.Errorf("find this process's executable: %w", err)
	}
	return exe, nil
}
