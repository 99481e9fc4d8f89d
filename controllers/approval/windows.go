package approval

import (
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

var weekdays = map[deckhousev1.Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// minutes parses "HH:MM" (validated by the CRD) into minutes after midnight.
func minutes(hhmm string) int {
	if len(hhmm) != 5 {
		return 0
	}
	return int(hhmm[0]-'0')*600 + int(hhmm[1]-'0')*60 + int(hhmm[3]-'0')*10 + int(hhmm[4]-'0')
}

// open reports whether the window is open at t (UTC). A window whose end is
// not after its start runs over midnight; its days are the days it opens.
func open(w deckhousev1.DisruptionWindow, t time.Time) bool {
	t = t.UTC()
	from, to := minutes(w.From), minutes(w.To)
	now := t.Hour()*60 + t.Minute()
	onDay := func(d time.Weekday) bool {
		if len(w.Days) == 0 {
			return true
		}
		for _, day := range w.Days {
			if weekdays[day] == d {
				return true
			}
		}
		return false
	}
	if from < to {
		return onDay(t.Weekday()) && now >= from && now < to
	}
	// Over midnight: open from `from` on an allowed day until `to` the next day.
	if now >= from {
		return onDay(t.Weekday())
	}
	return now < to && onDay(t.Add(-24*time.Hour).Weekday())
}

// InWindow reports whether disruptions are allowed at t: always when no
// windows are set, otherwise inside any of them.
func InWindow(windows []deckhousev1.DisruptionWindow, t time.Time) bool {
	if len(windows) == 0 {
		return true
	}
	for _, w := range windows {
		if open(w, t) {
			return true
		}
	}
	return false
}

// NextOpening returns when the next window opens after t (zero if there are
// no windows), so a waiting group is looked at again exactly then.
func NextOpening(windows []deckhousev1.DisruptionWindow, t time.Time) time.Time {
	var next time.Time
	t = t.UTC()
	midnight := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for _, w := range windows {
		for d := 0; d <= 8; d++ {
			start := midnight.AddDate(0, 0, d).Add(time.Duration(minutes(w.From)) * time.Minute)
			if !start.After(t) || !open(w, start) {
				continue
			}
			if next.IsZero() || start.Before(next) {
				next = start
			}
			break
		}
	}
	return next
}

// ClosesAt returns when the windows open at t close (zero if there are no
// windows or none is open), so a drain under way is called off on time.
func ClosesAt(windows []deckhousev1.DisruptionWindow, t time.Time) time.Time {
	var end time.Time
	t = t.UTC()
	midnight := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for _, w := range windows {
		if !open(w, t) {
			continue
		}
		close := midnight.Add(time.Duration(minutes(w.To)) * time.Minute)
		if !close.After(t) {
			close = close.AddDate(0, 0, 1) // a window over midnight
		}
		if close.After(end) {
			end = close
		}
	}
	return end
}
