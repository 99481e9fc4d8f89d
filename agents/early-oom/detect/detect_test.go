package detect

import (
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
	if err := (Thresholds{FullAvg10: 30, Samples: 1}).Validate(); err != nil {
		t.Errorf("valid thresholds refused: %v", err)
	}
	for _, bad := range []Thresholds{
		{FullAvg10: 0, Samples: 1},
		{FullAvg10: 100, Samples: 1},
		{FullAvg10: 30, Samples: 0},
		{FullAvg10: 30, Samples: 1, SomeAvg10: -1},
		{FullAvg10: 30, Samples: 1, MinAvailable: -1},
		{FullAvg10: 30, Samples: 1, Pause: -time.Second},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
