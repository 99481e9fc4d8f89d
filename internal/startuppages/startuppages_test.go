package startuppages

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

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
	before := resident()
	released, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := resident()
	t.Logf("resident pages of the executable: %d KiB before, %d KiB released, %d KiB after", before>>10, released.Resident>>10, after>>10)
	if len(released.Regions) == 0 || released.Resident == 0 {
		t.Fatalf("nothing released: %+v", released)
	}
	if after >= before/2 {
		t.Errorf("resident pages of the executable: %d KiB after release, want well below the %d KiB before", after>>10, before>>10)
	}
	// Code and read-only data in use again come back from the file.
	if got := strings.ToUpper(smapsSample[:8]); got != "00400000" {
		t.Errorf("strings.ToUpper after release: %q", got)
	}
	if _, err := plan(strings.NewReader(smapsSample), "/bin/server"); err != nil {
		t.Errorf("plan after release: %v", err)
	}
}
