package startuppages

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Release unmaps the pages of this process's executable that are mapped
// now (see the package documentation). Call it once, when start-up is
// over; the process goes on as before.
func Release(opts Options) (Released, error) {
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
		// of memory the runtime does not own. Random access first: a later
		// fault reads no window around the page from the file.
		for _, advice := range []int{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(region.Start), uintptr(region.End-region.Start), uintptr(advice)); errno != 0 {
				return r, fmt.Errorf("release the pages of %s at %#x-%#x (madvise %d): %w", exe, region.Start, region.End, advice, errno)
			}
		}
		r.Regions = append(r.Regions, region)
		r.Resident += region.Resident
	}
	if opts.DropCache && len(regions) > 0 {
		if err := dropCache(exe); err != nil {
			return r, err
		}
		r.DroppedCache = true
	}
	return r, nil
}

// dropCache asks the kernel to drop the pages of the file at path that no
// process maps from the page cache.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s to drop its unmapped pages from the page cache: %w", path, err)
	}
	defer f.Close()
	// The page cache keeps pages not yet written back (a binary built
	// moments ago); a file already written back costs nothing here, and
	// one that cannot be synced (a read-only filesystem) has none.
	_ = f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop the unmapped pages of %s from the page cache: %w", path, err)
	}
	return nil
}
