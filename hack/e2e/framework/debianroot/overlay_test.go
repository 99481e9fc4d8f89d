package debianroot

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// lowerLayer is a small stand-in for the cached root: a file and a
// directory.
func lowerLayer(t *testing.T) string {
	t.Helper()
	lower := filepath.Join(t.TempDir(), "cached")
	WriteFile(t, filepath.Join(lower, "etc", "os-release"), "ID=debian\n", 0o644)
	return lower
}

// TestOverlayKeepsTheCacheUnwrittenAndGoesWithTheTest: what a test writes,
// changes or deletes in its root stays out of the cached root, and the
// overlay is unmounted and removed when the test ends.
func TestOverlayKeepsTheCacheUnwrittenAndGoesWithTheTest(t *testing.T) {
	RequireRoot(t)
	lower := lowerLayer(t)
	var root string
	t.Run("test", func(t *testing.T) {
		root = overlay(t, lower)
		if !inUse(lower) {
			t.Errorf("a mounted overlay's lower layer %s is not seen in use", lower)
		}
		WriteFile(t, filepath.Join(root, "etc", "os-release"), "ID=changed\n", 0o644)
		WriteFile(t, filepath.Join(root, "var", "lib", "new"), "x", 0o600)
		if data, err := os.ReadFile(filepath.Join(root, "etc", "os-release")); err != nil || string(data) != "ID=changed\n" {
			t.Errorf("the root shows %q, %v; want what the test wrote", data, err)
		}
		if err := os.Remove(filepath.Join(root, "etc", "os-release")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, "etc", "os-release")); !os.IsNotExist(err) {
			t.Errorf("a removed file is still in the root (%v)", err)
		}
	})
	if data, err := os.ReadFile(filepath.Join(lower, "etc", "os-release")); err != nil || string(data) != "ID=debian\n" {
		t.Errorf("the cached root's file is %q, %v; want it unchanged", data, err)
	}
	if _, err := os.Stat(filepath.Join(lower, "var")); !os.IsNotExist(err) {
		t.Errorf("the cached root has var (%v); the test's writes belong to its own layer", err)
	}
	if _, err := os.Stat(filepath.Dir(root)); !os.IsNotExist(err) {
		t.Errorf("the overlay's directory %s outlived the test (%v)", filepath.Dir(root), err)
	}
	if inUse(lower) {
		t.Errorf("%s is still a mounted overlay's lower layer after the test", lower)
	}
}

// TestAbandonedOverlayIsRemoved: an overlay whose test process died before
// its cleanup is unmounted and removed by the next Fresh; a live owner's
// is left alone.
func TestAbandonedOverlayIsRemoved(t *testing.T) {
	RequireRoot(t)
	lower := lowerLayer(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	// As a killed test leaves its overlay: mounted, with no cleanup.
	abandoned, err := mountOverlay(lower, gone.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	live, err := mountOverlay(lower, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Unmount(filepath.Join(live, "root"), syscall.MNT_DETACH)
		_ = os.RemoveAll(live)
	})

	_ = overlay(t, lower) // the next Fresh

	if _, err := os.Stat(abandoned); !os.IsNotExist(err) {
		t.Errorf("the abandoned overlay %s was not removed (%v)", abandoned, err)
	}
	if left, _ := mountedUnder(filepath.Dir(abandoned)); slices.Contains(left, filepath.Join(abandoned, "root")) {
		t.Errorf("the abandoned overlay is still mounted: %v", left)
	}
	if _, err := os.Stat(filepath.Join(live, "root", "etc", "os-release")); err != nil {
		t.Errorf("a live test's overlay %s was touched: %v", live, err)
	}
}
