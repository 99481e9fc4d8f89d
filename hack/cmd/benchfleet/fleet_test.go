package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// refusingServer answers a watch with 429 (Retry-After: 1) refusals times,
// then opens it: one ADDED event, then the stream ends.
func refusingServer(t *testing.T, refusals int64) (*fleet, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) <= refusals {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte(`{"type":"ADDED","object":{}}` + "\n"))
	}))
	t.Cleanup(srv.Close)
	f := &fleet{server: srv.URL, roots: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	return f, &requests
}

func TestWatchOpensAfter429sOnceTheirRetryAfterHasPassed(t *testing.T) {
	t.Parallel()
	f, requests := refusingServer(t, 2)
	w := &watches{}
	start := time.Now()
	f.watch(context.Background(), w, &simNode{name: "node-00000", group: "fleet-01"})
	if w.opened.Load() != 1 || w.failed.Load() != 0 || w.retried429.Load() != 2 || requests.Load() != 3 {
		t.Errorf("opened %d, failed %d, retried %d, requests %d; want 1, 0, 2, 3",
			w.opened.Load(), w.failed.Load(), w.retried429.Load(), requests.Load())
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("opened after %s: two 429s with Retry-After 1 must wait at least 2 s", took)
	}
}

func TestWatchGivesUpAfterItsAttemptsAndSaysWhy(t *testing.T) {
	t.Parallel()
	f, requests := refusingServer(t, 1000)
	w := &watches{}
	f.watch(context.Background(), w, &simNode{name: "node-00000", group: "fleet-01"})
	if w.opened.Load() != 0 || w.failed.Load() != 1 || w.retried429.Load() != watchAttempts-1 || requests.Load() != watchAttempts {
		t.Errorf("opened %d, failed %d, retried %d, requests %d; want 0, 1, %d, %d",
			w.opened.Load(), w.failed.Load(), w.retried429.Load(), requests.Load(), watchAttempts-1, watchAttempts)
	}
	if r, ok := w.reasons.Load("status_429"); !ok || r.(*watchFailure).count.Load() != 1 {
		t.Errorf("the failure is not counted as status_429: %v", r)
	}
}
