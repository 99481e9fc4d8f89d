// Package rootfs is the real-run e2e suite: the rendered Debian worker
// bundle runs as root inside a Debian bookworm root built by debootstrap,
// against a package mirror on loopback, and must configure the machine and
// then, run again, change nothing.
//
// The root runs in namespaces of its own (mount, PID, UTS, IPC): its /proc
// is fresh with /proc/sys read-only, its host name is its own, and every
// mount disappears with the namespaces, even when the test dies. What
// cannot exist there is stubbed, and only that (framework/debianroot): systemd
// (systemctl, and policy-rc.d so package scripts start no services),
// the commands that would change the host's kernel (modprobe, sysctl,
// swapon, swapoff, hostnamectl), and the machine's addresses (ip -j addr:
// the root shares the host's network). Each stub that changes something
// records its calls; modprobe keeps what is loaded in the root's own /sys,
// where no sysfs is mounted, and softdog's device as a regular file.
package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fileState is what tells a rewritten file from an untouched one.
type fileState struct {
	mode  fs.FileMode
	size  int64
	mtime time.Time
	inode uint64
	link  string
}

// snapshot records every file of the root outside the kernel's, the
// stubs' and the scratch directories.
func snapshot(t *testing.T, root string) map[string]fileState {
	t.Helper()
	skip := map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "run": true, "var/tmp": true, "var/log": true, "var/lib/stub-systemd": true}
	files := map[string]fileState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if skip[rel] {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := fileState{mode: info.Mode(), size: info.Size(), mtime: info.ModTime()}
		if sys, ok := info.Sys().(*syscall.Stat_t); ok {
			st.inode = sys.Ino
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			st.link, _ = os.Readlink(p)
		}
		files[rel] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// changedFiles lists files added, removed or rewritten between snapshots.
func changedFiles(before, after map[string]fileState) []string {
	var changed []string
	for p, a := range after {
		if b, ok := before[p]; !ok || b != a {
			changed = append(changed, p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			changed = append(changed, p+" (removed)")
		}
	}
	return changed
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
