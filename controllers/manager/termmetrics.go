package manager

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// termMetrics registers a term's collectors on the process's registry and
// remembers them, so that they go when the term does: the next term's
// controllers register theirs afresh, and a standby exports none of the
// controllers' metrics (only the process's, and node_manager_leader).
type termMetrics struct {
	prometheus.Registerer
	mu         sync.Mutex
	registered []prometheus.Collector
}

// Register registers c on the process's registry.
func (r *termMetrics) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered = append(r.registered, c)
	return nil
}

// MustRegister registers cs and panics on a collision, as a registry does.
func (r *termMetrics) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// unregisterAll takes the term's collectors off the process's registry.
func (r *termMetrics) unregisterAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.registered {
		r.Registerer.Unregister(c)
	}
	r.registered = nil
}
