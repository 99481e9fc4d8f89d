package detect

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestRandomPressureNeverActsEarlyOrDuringAPause feeds thousands of random
// sample sequences with random thresholds and checks every action against
// the rules stated independently of the detector: the Samples samples up
// to the action are all over a threshold, none of them lies in the pause
// after the previous action, and no run of Samples such samples outside a
// pause goes without an action.
func TestRandomPressureNeverActsEarlyOrDuringAPause(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	for run := 0; run < 2000; run++ {
		th := Thresholds{
			FullAvg10: float64(1 + rng.IntN(60)),
			Samples:   1 + rng.IntN(6),
			Pause:     time.Duration(rng.IntN(8)) * time.Second,
		}
		if rng.IntN(2) == 0 {
			th.SomeAvg10 = float64(1 + rng.IntN(90))
		}
		if rng.IntN(2) == 0 {
			th.MinAvailable = int64(1 + rng.IntN(100))
		}
		d := New(th)
		over := func(s Sample) bool {
			return s.Pressure.Full.Avg10 > th.FullAvg10 ||
				(th.SomeAvg10 > 0 && s.Pressure.Some.Avg10 > th.SomeAvg10) ||
				(th.MinAvailable > 0 && s.Available >= 0 && s.Available < th.MinAvailable)
		}
		pausedUntil := time.Time{}
		streak := 0 // consecutive over samples outside a pause
		for i := 0; i < 60; i++ {
			s := at(i, float64(rng.IntN(100)), float64(rng.IntN(100)), int64(rng.IntN(200))-10)
			_, act := d.Observe(s)
			paused := s.Time.Before(pausedUntil)
			switch {
			case paused:
				streak = 0
			case over(s):
				streak++
			default:
				streak = 0
			}
			if act && (paused || streak < th.Samples) {
				t.Fatalf("thresholds %+v: acted at sample %d (paused %v, %d over in a row)", th, i, paused, streak)
			}
			if !act && streak >= th.Samples {
				t.Fatalf("thresholds %+v: %d samples over in a row at %d and no action", th, streak, i)
			}
			if act {
				d.Acted(s.Time)
				pausedUntil = s.Time.Add(th.Pause)
				streak = 0
			}
		}
	}
}
