package startuppages

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cached is how many bytes of the file f the page cache holds (mincore of
// a mapping of it that nothing touches).
func cached(t *testing.T, f *os.File) int64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * int64(page)
}

// mapped is how many bytes of the file exe this process maps, by any
// mapping.
func mapped(t *testing.T, exe string) int64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 6 && strings.Contains(fields[0], "-"):
			in = strings.Join(fields[5:], " ") == exe
		case in && len(fields) >= 2 && fields[0] == "Rss:":
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			n += kb << 10
		}
	}
	return n
}

// vmFlags is the VmFlags line of the mapping that starts at start.
func vmFlags(smaps string, start uint64) string {
	_, rest, ok := strings.Cut(smaps, fmt.Sprintf("%08x-", start))
	if !ok {
		return ""
	}
	_, rest, _ = strings.Cut(rest, "VmFlags:")
	line, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(line)
}

const smapsSample = `00400000-025f5000 r-xp 00000000 fe:00 9994553                            /bin/server
Size:              35796 kB
Rss:               27220 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me sd
025f5000-04ea5000 r--p 021f5000 fe:00 9994553                            /bin/server
Size:              41664 kB
Rss:               35264 kB
Anonymous:             0 kB
Swap:                  0 kB
04ea5000-04f80000 rw-p 04aa5000 fe:00 9994553                            /bin/server
Rss:                 876 kB
Anonymous:           268 kB
Swap:                  0 kB
05000000-05001000 r--p 04b00000 fe:00 9994553                            /bin/server
Rss:                   4 kB
Anonymous:             4 kB
Swap:                  0 kB
05001000-05002000 r--p 04b01000 fe:00 9994553                            /bin/server
Rss:                   4 kB
06000000-06001000 r--s 00000000 fe:00 9994553                            /bin/server
Rss:                   4 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0000000000-7f0000001000 r-xp 00000000 fe:00 1234                       /lib/libc.so.6
Rss:                   4 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0000002000-7f0000003000 r-xp 00000000 fe:00 9994553                    /bin/server (deleted)
Rss:                   4 kB
Anonymous:             0 kB
Swap:                  0 kB
07000000-07001000 r--p 04c00000 fe:00 9994553                            /bin/server
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  4 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                  12 kB
Anonymous:            12 kB
`

// TestOnlyTheExecutablesUntouchedReadOnlyPrivateMappingsAreReleased: the
// text and read-only data are; not the writable data, not a read-only
// mapping with a page copied on write (relocations), resident or swapped
// out, or with no Anonymous field to tell, not a shared mapping, not
// another file.
func TestOnlyTheExecutablesUntouchedReadOnlyPrivateMappingsAreReleased(t *testing.T) {
	regions, err := plan(strings.NewReader(smapsSample), "/bin/server")
	if err != nil {
		t.Fatal(err)
	}
	want := []Region{{0x400000, 0x25f5000, 27220 << 10}, {0x25f5000, 0x4ea5000, 35264 << 10}}
	if len(regions) != len(want) {
		t.Fatalf("released %+v, want %+v", regions, want)
	}
	for i := range want {
		if regions[i] != want[i] {
			t.Errorf("region %d: %+v, want %+v", i, regions[i], want[i])
		}
	}
}

// TestReleaseLowersTheResidentPagesAndTheProcessRunsOn releases this test
// binary's own pages, then runs code and reads data it had not used since.
func TestReleaseLowersTheResidentPagesAndTheProcessRunsOn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	exe, err := executable()
	if err != nil {
		t.Fatal(err)
	}
	resident := func() int64 {
		f, err := os.Open("/proc/self/smaps")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		regions, err := plan(f, exe)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, r := range regions {
			n += r.Resident
		}
		return n
	}
	// The test binary was just linked: its pages may not be written back
	// yet, and the page cache keeps dirty pages.
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before, cachedBefore := resident(), cached(t, f)
	released, err := Release(Options{DropCache: true})
	if err != nil {
		t.Fatal(err)
	}
	after, cachedAfter := resident(), cached(t, f)
	t.Logf("resident pages of the executable: %d KiB before, %d KiB released, %d KiB after; in the page cache: %d KiB before, %d KiB after",
		before>>10, released.Resident>>10, after>>10, cachedBefore>>10, cachedAfter>>10)
	if len(released.Regions) == 0 || released.Resident == 0 || !released.DroppedCache {
		t.Fatalf("nothing released: %+v", released)
	}
	if after >= before {
		t.Errorf("resident pages of the executable: %d KiB after release, want fewer than the %d KiB before", after>>10, before>>10)
	}
	// What the page cache holds of the file beyond what this process maps
	// of it (every mapping, the writable data's too) is gone, but for the
	// window read around a fault of code since.
	if extra := cachedAfter - mapped(t, exe); extra > 512<<10 {
		t.Errorf("the page cache holds %d KiB of the executable beyond what is mapped (%d KiB before release), want it dropped", extra>>10, (cachedBefore-before)>>10)
	}
	// Every released mapping reads at random from now on (smaps: rr).
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range released.Regions {
		if flags := vmFlags(string(smaps), r.Start); !strings.Contains(" "+flags+" ", " rr ") {
			t.Errorf("mapping at %#x: VmFlags %q, want rr (MADV_RANDOM)", r.Start, flags)
		}
	}
	// Code and read-only data in use again come back from the file.
	if got := strings.ToUpper(smapsSample[:8]); got != "00400000" {
		t.Errorf("strings.ToUpper after release: %q", got)
	}
	if _, err := plan(strings.NewReader(smapsSample), "/bin/server"); err != nil {
		t.Errorf("plan after release: %v", err)
	}
}
