package agent

import (
	"sync/atomic"

	"github.com/node-manager/node-manager/agents/fencing-agent/watchdog"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// NoDevice is the device of Notify mode: the agent detects and labels as
// in Watchdog mode, but no watchdog is ever opened, so nothing resets the
// node; the fencing controller frees a dead node's pods and keeps its Node.
type NoDevice struct{ armed atomic.Bool }

// Arm implements Device; it opens nothing.
func (d *NoDevice) Arm() error { d.armed.Store(true); return nil }

// Feed implements Device; there is nothing to feed.
func (d *NoDevice) Feed() error { return nil }

// Disarm implements Device.
func (d *NoDevice) Disarm() error { d.armed.Store(false); return nil }

// Armed implements Device: whether the agent has promised it watches.
func (d *NoDevice) Armed() bool { return d.armed.Load() }

// NewDevice is the device for mode: the watchdog at path in Watchdog mode,
// NoDevice in Notify mode (path is then never opened).
func NewDevice(mode, path string) Device {
	if mode == deckhousev1.FencingModeNotify {
		return &NoDevice{}
	}
	return watchdog.New(path)
}
