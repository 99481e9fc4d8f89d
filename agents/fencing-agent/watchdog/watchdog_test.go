package watchdog

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// device is a regular file standing in for /dev/watchdog.
func device(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func written(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestArmOpensTheDeviceAndWritesNothing(t *testing.T) {
	path := device(t)
	d := New(path)
	if d.Armed() {
		t.Fatal("a new device reports armed before Arm")
	}
	if err := d.Arm(); err != nil {
		t.Fatal(err)
	}
	if !d.Armed() {
		t.Fatal("not armed after Arm")
	}
	if got := written(t, path); got != "" {
		t.Fatalf("arming wrote %q; opening alone starts the timer", got)
	}
	if err := d.Arm(); err != nil {
		t.Fatalf("arming twice: %v", err)
	}
}

func TestEachFeedWritesOneByteAndDisarmEndsWithTheMagicClose(t *testing.T) {
	path := device(t)
	d := New(path)
	if err := d.Arm(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := d.Feed(); err != nil {
			t.Fatal(err)
		}
	}
	if got := written(t, path); got != "111" {
		t.Fatalf("after three feeds the device got %q, want one byte per feed", got)
	}
	if err := d.Disarm(); err != nil {
		t.Fatal(err)
	}
	if got := written(t, path); got != "111V" {
		t.Fatalf("after disarm the device got %q, want the feeds then the magic close V", got)
	}
	if d.Armed() {
		t.Fatal("still armed after Disarm")
	}
}

func TestFeedingADisarmedDeviceFails(t *testing.T) {
	d := New(device(t))
	if err := d.Feed(); err == nil {
		t.Fatal("feeding a device that was never armed succeeded")
	}
}

func TestDisarmingADisarmedDeviceSucceedsAndWritesNothing(t *testing.T) {
	path := device(t)
	d := New(path)
	if err := d.Disarm(); err != nil {
		t.Fatalf("disarming a device never armed: %v", err)
	}
	if err := d.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := d.Disarm(); err != nil {
		t.Fatal(err)
	}
	if err := d.Disarm(); err != nil {
		t.Fatalf("disarming twice: %v", err)
	}
	if got := written(t, path); got != "V" {
		t.Fatalf("device got %q, want exactly one magic close", got)
	}
}

func TestDisarmingAnAlreadyClosedDeviceCountsAsSuccess(t *testing.T) {
	d := New(device(t))
	if err := d.Arm(); err != nil {
		t.Fatal(err)
	}
	// Someone closed the file under the wrapper (as Deckhouse's agent saw
	// when its signal handler raced the loop).
	if err := d.f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Disarm(); err != nil {
		t.Fatalf("disarming an already closed device: %v", err)
	}
	if d.Armed() {
		t.Fatal("still armed")
	}
}

func TestArmingAMissingDeviceFailsNamingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-watchdog")
	d := New(path)
	err := d.Arm()
	if err == nil {
		t.Fatal("arming a missing device succeeded")
	}
	if d.Armed() {
		t.Fatal("armed after a failed Arm")
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name the device", err)
	}
}

// A FIFO behaves like the character device where it matters: writes are
// a stream the reader sees in order, nothing is re-read.
func TestFeedsAndTheMagicCloseReachAFIFOReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "watchdog")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// O_RDWR does not wait for a writer and keeps the FIFO open after the
	// writer's close, as the e2e suite's recorder does.
	r, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	d := New(path)
	if err := d.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := d.Feed(); err != nil {
		t.Fatal(err)
	}
	if err := d.Feed(); err != nil {
		t.Fatal(err)
	}
	if err := d.Disarm(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(r)
	got := make([]byte, 3)
	for i := range got {
		if got[i], err = br.ReadByte(); err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "11V" {
		t.Fatalf("the FIFO reader got %q, want 11V", got)
	}
}
