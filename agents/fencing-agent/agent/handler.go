package agent

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics, /healthz (the loop turns) and /readyz (joined,
// synced, and armed or deliberately disarmed; the body says why not, and
// whether the group is too small for a quorum).
func (a *Agent) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, msg := a.Ready()
		if !ok {
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, msg)
	})
	return mux
}
