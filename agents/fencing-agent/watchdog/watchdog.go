// Package watchdog drives a Linux watchdog device (/dev/watchdog, which
// the node step makes with softdog): opening it arms the timer, every
// write feeds it, and the magic close — the character 'V', then close —
// stops it. Without the magic close, closing the device leaves the timer
// running, so a process that dies armed still has its node reset when the
// timer expires: that is the point of fencing.
//
// The device is any file: the unit tests and the e2e suite give a regular
// file or a FIFO and read what was written.
package watchdog

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

const (
	// feedByte is what a feed writes. Any byte but magicClose restarts the
	// timer; '1' is what `echo 1 > /dev/watchdog` writes by hand.
	feedByte = '1'
	// magicClose, written just before close, tells the driver the close is
	// deliberate, so it stops the timer (unless the kernel was built with
	// nowayout).
	magicClose = 'V'
)

// Device is one watchdog device. Its methods are safe for concurrent use.
type Device struct {
	path string

	mu sync.Mutex
	f  *os.File // nil while disarmed
}

// New is the device at path, disarmed: nothing is opened until Arm.
func New(path string) *Device { return &Device{path: path} }

// Path is the device's path.
func (d *Device) Path() string { return d.path }

// Armed reports whether the device is open, so its timer runs.
func (d *Device) Armed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.f != nil
}

// Arm opens the device write-only, which starts its timer. Arming an
// armed device does nothing.
func (d *Device) Arm() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f != nil {
		return nil
	}
	f, err := os.OpenFile(d.path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("arming watchdog %s: %w (is softdog loaded and the device writable by this user?)", d.path, err)
	}
	d.f = f
	return nil
}

// Feed restarts the timer by writing one byte. Feeding a disarmed device
// is an error: nothing would be fed.
func (d *Device) Feed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return fmt.Errorf("feeding watchdog %s: it is not armed", d.path)
	}
	if _, err := d.f.Write([]byte{feedByte}); err != nil {
		return fmt.Errorf("feeding watchdog %s: %w", d.path, err)
	}
	return nil
}

// Disarm stops the timer with the magic close: 'V', then close. Disarming
// a disarmed device, or one whose file is already closed, succeeds: there
// is no timer left to stop. When the 'V' cannot be written the device is
// closed anyway and the error returned: the timer then keeps running and
// will reset the node, which the caller must know.
func (d *Device) Disarm() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil
	}
	f := d.f
	d.f = nil
	_, werr := f.Write([]byte{magicClose})
	cerr := f.Close()
	if errors.Is(werr, os.ErrClosed) {
		return nil
	}
	if werr != nil {
		return fmt.Errorf("disarming watchdog %s: writing the magic close: %w; the timer keeps running", d.path, werr)
	}
	if cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		return fmt.Errorf("disarming watchdog %s: closing: %w", d.path, cerr)
	}
	return nil
}
