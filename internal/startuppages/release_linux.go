package startuppages

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Release unmaps the pages of this process's executable that are mapped
// now (see the package documentation). Call it once, when start-up is
// over; the process goes on as before.
func Release() (Released, error) {
	exe, err := executable()
	if err != nil {
		return Released{}, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Released{}, fmt.Errorf("read this process's mappings: %w", err)
	}
	regions, err := plan(f, exe)
	_ = f.Close()
	if err != nil {
		return Released{}, err
	}
	var r Released
	for _, region := range regions {
		// The range is a whole mapping of the file, page-aligned; the
		// syscall takes addresses, not a Go slice, so no Go pointer is made
		// of memory the runtime does not own.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(region.Start), uintptr(region.End-region.Start), unix.MADV_DONTNEED); errno != 0 {
			return r, fmt.Errorf("release the pages of %s at %#x-%#x: %w", exe, region.Start, region.End, errno)
		}
		r.Regions = append(r.Regions, region)
		r.Resident += region.Resident
	}
	return r, nil
}
