package detect

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/node-manager/node-manager/agents/early-oom/psi"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is a sample i seconds after t0 with the given full and some avg10
// and MemAvailable.
func at(i int, full, some float64, available int64) Sample {
	return Sample{
		Time:      t0.Add(time.Duration(i) * time.Second),
		Pressure:  psi.Pressure{Full: psi.Averages{Avg10: full}, Some: psi.Averages{Avg10: some}},
		Available: available,
	}
}

// run feeds the samples in order, calling Acted after each action, and
// returns the indexes of the samples it acted on.
func run(d *Detector, samples []Sample) []int {
	var acted []int
	for i, s := range samples {
		if _, act := d.Observe(s); act {
			acted = append(acted, i)
			d.Acted(s.Time)
		}
	}
	return acted
}

func TestActsOnlyAfterConsecutiveSamplesAboveTheThreshold(t *testing.T) {
	d := New(Thresholds{FullAvg10: 20, Samples: 3, Pause: 10 * time.Second})
	got := run(d, []Sample{
		at(0, 25, 0, -1), at(1, 30, 0, -1), // two over
		at(2, 20, 0, -1),                   // equal is not over: the count restarts
		at(3, 21, 0, -1), at(4, 50, 0, -1), // two over
		at(5, 90, 0, -1), // the third in a row: act
	})
	if len(got) != 1 || got[0] != 5 {
		t.Errorf("acted on samples %v; want [5]", got)
	}
}

func TestRecoveryPauseIgnoresSamplesThenCountsAfresh(t *testing.T) {
	d := New(Thresholds{FullAvg10: 20, Samples: 2, Pause: 5 * time.Second})
	var samples []Sample
	for i := 0; i < 12; i++ {
		samples = append(samples, at(i, 80, 0, -1))
	}
	// Act at 1 (two samples); paused until 6; 6 and 7 count; act at 7;
	// paused until 12.
	got := run(d, samples)
	if len(got) != 2 || got[0] != 1 || got[1] != 7 {
		t.Errorf("acted on samples %v; want [1 7]", got)
	}
	if !d.Paused(t0.Add(11*time.Second)) || d.Paused(t0.Add(12*time.Second)) {
		t.Error("the pause after the second action does not end at 12 s")
	}
}

func TestSomeAndMemAvailableAreOptionalTriggers(t *testing.T) {
	off := New(Thresholds{FullAvg10: 50, Samples: 1})
	if r, act := off.Observe(at(0, 10, 99, 1)); act {
		t.Errorf("with some and the floor off, high some and no memory acted (%s)", r)
	}
	on := New(Thresholds{FullAvg10: 50, SomeAvg10: 60, MinAvailable: 100, Samples: 1})
	for _, tc := range []struct {
		s    Sample
		want Reason
	}{
		{at(0, 51, 99, 1), FullPressure},
		{at(1, 10, 61, 1000), SomePressure},
		{at(2, 10, 10, 99), LowMemory},
		{at(3, 10, 10, -1), ""}, // MemAvailable unknown: not checked
		{at(4, 50, 60, 100), ""},
	} {
		r, act := on.Observe(tc.s)
		if r != tc.want || act != (tc.want != "") {
			t.Errorf("sample %+v: got %q, %v; want %q", tc.s, r, act, tc.want)
		}
	}
}

func TestValidateNamesTheBadSetting(t *testing.T) {
	ok := Thresholds{FullAvg10: 30, Samples: 1, Pause: 30 * time.Second}
	for _, floor := range []int64{0, MinFloor, 256 << 20, MaxFloor} {
		valid := ok
		valid.MinAvailable = floor
		if err := valid.Validate(); err != nil {
			t.Errorf("valid thresholds %+v refused: %v", valid, err)
		}
	}
	with := func(f func(*Thresholds)) Thresholds { t := ok; f(&t); return t }
	for want, bad := range map[string]Thresholds{
		"fullAvg10 0":          with(func(t *Thresholds) { t.FullAvg10 = 0 }),
		"fullAvg10 1":          with(func(t *Thresholds) { t.FullAvg10 = 1 }),
		"fullAvg10 100":        with(func(t *Thresholds) { t.FullAvg10 = 100 }),
		"samples 0":            with(func(t *Thresholds) { t.Samples = 0 }),
		"samples 301":          with(func(t *Thresholds) { t.Samples = 301 }),
		"someAvg10 -1":         with(func(t *Thresholds) { t.SomeAvg10 = -1 }),
		"someAvg10 2":          with(func(t *Thresholds) { t.SomeAvg10 = 2 }),
		"memAvailableFloor -1": with(func(t *Thresholds) { t.MinAvailable = -1 }),
		// A size without its unit, and one no node holds back.
		"memAvailableFloor 256 bytes: want 0 (off) or a size from 1Mi to 1Ti":           with(func(t *Thresholds) { t.MinAvailable = 256 }),
		"memAvailableFloor 1099511627777 bytes: want 0 (off) or a size from 1Mi to 1Ti": with(func(t *Thresholds) { t.MinAvailable = 1<<40 + 1 }),
		// NaN compares false with every bound.
		"fullAvg10 NaN":        with(func(t *Thresholds) { t.FullAvg10 = math.NaN() }),
		"someAvg10 NaN":        with(func(t *Thresholds) { t.SomeAvg10 = math.NaN() }),
		"recoveryPause -1s":    with(func(t *Thresholds) { t.Pause = -time.Second }),
		"recoveryPause 0s":     with(func(t *Thresholds) { t.Pause = 0 }),
		"recoveryPause 5s":     with(func(t *Thresholds) { t.Pause = 5 * time.Second }),
		"recoveryPause 2h0m0s": with(func(t *Thresholds) { t.Pause = 2 * time.Hour }),
	} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v; want an error naming %q", bad, err, want)
		}
	}
}

// TestTheFloorIsBoundedByTheNodesRAM: a MemAvailable floor above half the
// RAM (or above all of it) is refused on that node, and passes where the
// RAM is unknown or large enough.
func TestTheFloorIsBoundedByTheNodesRAM(t *testing.T) {
	th := Thresholds{FullAvg10: 30, Samples: 1, Pause: 30 * time.Second, MinAvailable: 3 << 30}
	for _, total := range []int64{2 << 30, 4 << 30} {
		if err := th.ValidateFor(total); err == nil || !strings.Contains(err.Error(), "memAvailableFloor") {
			t.Errorf("a 3Gi floor on %d bytes of RAM: %v; want refused", total, err)
		}
	}
	for _, total := range []int64{0, 8 << 30} {
		if err := th.ValidateFor(total); err != nil {
			t.Errorf("a 3Gi floor on %d bytes of RAM refused: %v", total, err)
		}
	}
}

// TestTheBudgetAllowsMaxPerSlidingWindow: three evictions in a minute
// spend a budget of three; the fourth waits until the first leaves the
// window.
func TestTheBudgetAllowsMaxPerSlidingWindow(t *testing.T) {
	var b Budget
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		if !b.Allow(now, 3, time.Minute) {
			t.Fatalf("eviction %d refused", i+1)
		}
		b.Spend(now)
	}
	if b.Allow(t0.Add(59*time.Second), 3, time.Minute) {
		t.Error("a fourth eviction within the minute allowed")
	}
	if !b.Allow(t0.Add(60*time.Second), 3, time.Minute) {
		t.Error("refused after the first eviction left the window")
	}
}
