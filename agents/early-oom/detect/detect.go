// Package detect decides when memory pressure has lasted long enough to
// act. It is a pure function of the samples it is shown and the
// thresholds: no clock, no files, so that every rule is a table test.
//
// A sample is over the thresholds when the full avg10 (the share of the
// last ten seconds in which every non-idle task was stalled on memory) is
// above FullAvg10, or, when SomeAvg10 is set, the some avg10 (at least one
// task stalled) is above it, or, when MinAvailable is set, MemAvailable is
// below it. The detector acts only after Samples consecutive samples over
// the thresholds, so that a short spike (Deckhouse's fixed single-sample
// threshold killed Loki ingesters during spikes) is ridden out; after each
// action it pauses for Pause and starts counting afresh, so that the
// averages, which decay over ten seconds, can show the action's effect
// before another victim is chosen.
package detect

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-manager/node-manager/agents/early-oom/psi"
)

// Thresholds say when to act.
type Thresholds struct {
	// FullAvg10 is the full avg10 percentage above which a sample counts.
	FullAvg10 float64
	// SomeAvg10, when above zero, also counts a sample whose some avg10
	// is above it.
	SomeAvg10 float64
	// MinAvailable, when above zero, also counts a sample whose
	// MemAvailable (bytes) is below it.
	MinAvailable int64
	// Samples is how many consecutive samples must count before acting.
	Samples int
	// Pause is how long to wait after an action before counting again.
	Pause time.Duration
}

// The bounds of the thresholds. Outside them a setting is destructive
// rather than a choice: a full avg10 of 1 % evicts at the first stall, a
// recovery pause shorter than the ten seconds avg10 averages over evicts
// the next pod before the last eviction can show in the figures (0s: one
// pod every Samples samples for as long as the average decays), and a
// MemAvailable floor above half the node's RAM evicts on an idle node.
// The floor's absolute bounds catch what is a typo on any node: below
// MinFloor it is a size without its unit (256 for 256Mi), which never
// triggers; above MaxFloor no node needs that much memory held back.
const (
	MinAvg10           = 10.0
	MaxSamples         = 300
	MinPause           = 10 * time.Second
	MaxPause           = time.Hour
	MaxFloorShareOfRAM = 0.5
	MinFloor           = 1 << 20
	MaxFloor           = 1 << 40
)

// Validate says what is wrong with t, naming the setting. The floor's
// bound depends on the node's RAM: ValidateFor checks it.
func (t Thresholds) Validate() error {
	var errs []error
	// Written so that NaN, which compares false with everything (and
	// would never trigger), is out of bounds too.
	if !(t.FullAvg10 >= MinAvg10 && t.FullAvg10 < 100) {
		errs = append(errs, fmt.Errorf("fullAvg10 %v: want a percentage from %v and below 100", t.FullAvg10, MinAvg10))
	}
	if t.SomeAvg10 != 0 && !(t.SomeAvg10 >= MinAvg10 && t.SomeAvg10 < 100) {
		errs = append(errs, fmt.Errorf("someAvg10 %v: want 0 (off) or a percentage from %v and below 100", t.SomeAvg10, MinAvg10))
	}
	if t.MinAvailable != 0 && (t.MinAvailable < MinFloor || t.MinAvailable > MaxFloor) {
		errs = append(errs, fmt.Errorf("memAvailableFloor %d bytes: want 0 (off) or a size from %s to %s (and at most %v of each node's RAM)",
			t.MinAvailable, resource.NewQuantity(MinFloor, resource.BinarySI), resource.NewQuantity(MaxFloor, resource.BinarySI), MaxFloorShareOfRAM))
	}
	if t.Samples < 1 || t.Samples > MaxSamples {
		errs = append(errs, fmt.Errorf("samples %d: want 1 to %d", t.Samples, MaxSamples))
	}
	if t.Pause < MinPause || t.Pause > MaxPause {
		errs = append(errs, fmt.Errorf("recoveryPause %s: want %s to %s (an action shows in avg10 only after about ten seconds)", t.Pause, MinPause, MaxPause))
	}
	return errors.Join(errs...)
}

// ValidateFor is Validate on a node with memTotal bytes of RAM: the
// MemAvailable floor must also be at most MaxFloorShareOfRAM of it.
// memTotal 0 (unknown) skips that check.
func (t Thresholds) ValidateFor(memTotal int64) error {
	err := t.Validate()
	if memTotal > 0 && float64(t.MinAvailable) > MaxFloorShareOfRAM*float64(memTotal) {
		err = errors.Join(err, fmt.Errorf("memAvailableFloor %d bytes: above %v of this node's RAM (MemTotal %d bytes), it would evict on an idle node",
			t.MinAvailable, MaxFloorShareOfRAM, memTotal))
	}
	return err
}

// Reason is why a sample counts, the first that holds in this order.
type Reason string

const (
	FullPressure Reason = "FullPressure"
	SomePressure Reason = "SomePressure"
	LowMemory    Reason = "LowMemory"
)

// Reasons are all the reasons, for metrics that show every label.
var Reasons = []Reason{FullPressure, SomePressure, LowMemory}

// Sample is one reading of the node.
type Sample struct {
	Time time.Time
	// Pressure is the pressure the thresholds apply to: the node's
	// shortage as the pods feel it (package attribute).
	Pressure psi.Pressure
	// NodePressure is the node-wide /proc/pressure/memory, for the record.
	NodePressure psi.Pressure
	// Available is MemAvailable in bytes; negative when it could not be
	// read (the floor is then not checked).
	Available int64
}

// Detector counts consecutive samples over the thresholds. The zero value
// is not usable; make one with New.
type Detector struct {
	t           Thresholds
	over        int
	pausedUntil time.Time
}

// New is a detector for t.
func New(t Thresholds) *Detector { return &Detector{t: t} }

// SetThresholds changes the thresholds (the settings were edited) keeping
// the count and the pause.
func (d *Detector) SetThresholds(t Thresholds) { d.t = t }

// Over says whether s counts, and why.
func (d *Detector) Over(s Sample) (Reason, bool) {
	switch {
	case s.Pressure.Full.Avg10 > d.t.FullAvg10:
		return FullPressure, true
	case d.t.SomeAvg10 > 0 && s.Pressure.Some.Avg10 > d.t.SomeAvg10:
		return SomePressure, true
	case d.t.MinAvailable > 0 && s.Available >= 0 && s.Available < d.t.MinAvailable:
		return LowMemory, true
	}
	return "", false
}

// Observe takes the next sample and says whether to act now, and why.
// Samples during a pause are ignored; a sample under the thresholds resets
// the count. After acting, call Acted.
func (d *Detector) Observe(s Sample) (Reason, bool) {
	if s.Time.Before(d.pausedUntil) {
		d.over = 0
		return "", false
	}
	reason, over := d.Over(s)
	if !over {
		d.over = 0
		return "", false
	}
	d.over++
	if d.over < d.t.Samples {
		return reason, false
	}
	return reason, true
}

// Acted starts the recovery pause at now and resets the count. It is
// called after every decision to act, whether a pod was evicted, only
// reported (observe mode) or none could be chosen, so that the agent does
// not repeat itself every sample.
func (d *Detector) Acted(now time.Time) {
	d.over = 0
	d.pausedUntil = now.Add(d.t.Pause)
}

// Paused says whether the detector is in its recovery pause at now.
func (d *Detector) Paused(now time.Time) bool { return now.Before(d.pausedUntil) }

// Budget bounds how many evictions one node makes in a sliding window, so
// that a fault in the figures (or in the thresholds) cannot empty a node:
// past the budget the agent reports and deletes nothing until the oldest
// eviction leaves the window. The zero value is an empty record.
type Budget struct {
	spent []time.Time
}

// Allow says whether one more eviction at now stays within max in the
// window ending at now.
func (b *Budget) Allow(now time.Time, max int, window time.Duration) bool {
	return b.Spent(now, window) < max
}

// Spent is how many evictions the window ending at now holds.
func (b *Budget) Spent(now time.Time, window time.Duration) int {
	keep := b.spent[:0]
	for _, t := range b.spent {
		if now.Sub(t) < window {
			keep = append(keep, t)
		}
	}
	b.spent = keep
	return len(b.spent)
}

// Spend records an eviction at now.
func (b *Budget) Spend(now time.Time) { b.spent = append(b.spent, now) }
