package bundles

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of rendering, publishing and serving
// bundles (the requests served are counted by registry.Metrics). Label
// values are node group names, bounded by the cluster's NodeGroups; a
// group's series are deleted when the group goes.
type Metrics struct {
	RenderDuration *prometheus.HistogramVec
	RenderErrors   *prometheus.CounterVec
	RenderCached   prometheus.Counter
	BundleBytes    *prometheus.GaugeVec
	Checksum       *prometheus.GaugeVec
	Leader         prometheus.Gauge
	BundleTooLarge *prometheus.GaugeVec
	PinnedRevision *prometheus.GaugeVec

	mu        sync.Mutex
	checksums map[string]string // group → checksum label currently set
}

// NewMetrics creates the metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		RenderDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bashible_apiserver_render_duration_seconds",
			Help:    "Time to render one node group's bundle.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"group"}),
		RenderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bashible_apiserver_render_errors_total",
			Help: "Renders of a node group that failed; the group keeps serving its last good bundle.",
		}, []string{"group"}),
		RenderCached: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bashible_apiserver_render_cache_hits_total",
			Help: "Node group renders skipped because none of the group's inputs changed.",
		}),
		BundleBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bashible_apiserver_bundle_size_bytes",
			Help: "Bytes of script a node group's nodes receive (bashible.sh and steps), as served.",
		}, []string{"group"}),
		Checksum: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bashible_apiserver_configuration_checksum",
			Help: "Always 1; the checksum label is the configuration checksum a node group serves.",
		}, []string{"group", "checksum"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bashible_apiserver_leader",
			Help: "1 while this replica publishes bundles, 0 otherwise.",
		}),
		BundleTooLarge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bashible_apiserver_bundle_too_large",
			Help: "1 while a node group's rendered bundle is too large for a Secret and is not published (the group keeps its last good bundle); set by the leader.",
		}, []string{"group"}),
		PinnedRevision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bashible_apiserver_pinned_revision",
			Help: "The bundle revision a pinned node group's nodes receive (NodeGroup spec.update.pinnedRevision); absent for a group that is not pinned.",
		}, []string{"group"}),
		checksums: map[string]string{},
	}
}

// Collectors lists every metric for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.RenderDuration, m.RenderErrors, m.RenderCached, m.BundleBytes, m.Checksum, m.Leader, m.BundleTooLarge, m.PinnedRevision}
}

// ServedChanged updates the per-group serving metrics; cur nil means the
// group is gone.
func (m *Metrics) ServedChanged(old, cur *Published) {
	m.mu.Lock()
	defer m.mu.Unlock()
	group := ""
	if old != nil {
		group = old.Group
	}
	if cur != nil {
		group = cur.Group
	}
	if prev, ok := m.checksums[group]; ok {
		m.Checksum.DeleteLabelValues(group, prev)
		delete(m.checksums, group)
	}
	if cur == nil || cur.PinnedRevision == 0 {
		m.PinnedRevision.DeleteLabelValues(group)
	} else {
		m.PinnedRevision.WithLabelValues(group).Set(float64(cur.PinnedRevision))
	}
	if cur == nil {
		m.BundleBytes.DeleteLabelValues(group)
		m.RenderDuration.DeleteLabelValues(group)
		m.RenderErrors.DeleteLabelValues(group)
		return
	}
	m.Checksum.WithLabelValues(group, cur.Checksum).Set(1)
	m.checksums[group] = cur.Checksum
	m.BundleBytes.WithLabelValues(group).Set(float64(cur.Size()))
}

// ForgetGroup drops the render series of a group that no longer exists.
func (m *Metrics) ForgetGroup(group string) {
	m.RenderDuration.DeleteLabelValues(group)
	m.RenderErrors.DeleteLabelValues(group)
	m.BundleTooLarge.DeleteLabelValues(group)
}
