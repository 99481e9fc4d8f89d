package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-manager/node-manager/agents/early-oom/detect"
	"github.com/node-manager/node-manager/agents/early-oom/settings"
)

// Results of an action, the result label of early_oom_actions_total.
const (
	ResultEvicted    = "evicted"
	ResultWouldEvict = "would_evict"
	ResultNoVictim   = "no_victim"
	ResultFailed     = "failed"
	// ResultBudgetExhausted: the node's eviction budget was spent; nothing
	// was deleted.
	ResultBudgetExhausted = "budget_exhausted"
)

// metrics are the agent's Prometheus series. Every label has a fixed,
// small set of values (reasons, results, QoS classes, modes), never a pod
// or node name: the scraper adds the pod's own labels.
type metrics struct {
	psiUnavailable  prometheus.Gauge
	pressure        *prometheus.GaugeVec
	podsPressure    *prometheus.GaugeVec
	limitedPressure prometheus.Counter
	available       prometheus.Gauge
	mode            *prometheus.GaugeVec
	settingsInvalid prometheus.Gauge
	actions         *prometheus.CounterVec
	victims         *prometheus.CounterVec
	readErrors      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		psiUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "early_oom_psi_unavailable",
			Help: "1 when the kernel offers no memory PSI (/proc/pressure/memory missing or unsupported): the agent idles and is not ready."}),
		pressure: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "early_oom_memory_pressure_avg10_percent",
			Help: "The node's memory pressure over the last 10 s as last sampled, by kind (some: at least one task stalled; full: all were)."}, []string{"kind"}),
		podsPressure: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "early_oom_pods_memory_pressure_avg10_percent",
			Help: "The memory pressure the thresholds apply to, as last sampled, by kind: the pods' (their parent cgroup's, at most the highest of the pods not at their own memory limit), or the node's where cgroups give none."}, []string{"kind"}),
		limitedPressure: prometheus.NewCounter(prometheus.CounterOpts{Name: "early_oom_limited_pressure_samples_total",
			Help: "Samples in which the node-wide memory pressure was over the thresholds only by the stalls of pods at their own memory limit: the node was not short, nothing counted."}),
		available: prometheus.NewGauge(prometheus.GaugeOpts{Name: "early_oom_memory_available_bytes",
			Help: "MemAvailable as last sampled."}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "early_oom_mode",
			Help: "1 for the mode in force on this node (Evict, Observe, Disabled), 0 for the others."}, []string{"mode"}),
		settingsInvalid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "early_oom_settings_invalid",
			Help: "1 while the settings ConfigMap cannot be used for this node; the flags' settings apply meanwhile."}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "early_oom_actions_total",
			Help: "Decisions to act, by reason (FullPressure, SomePressure, LowMemory) and result (evicted, would_evict, no_victim, failed, budget_exhausted)."}, []string{"reason", "result"}),
		victims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "early_oom_victims_total",
			Help: "Pods deleted (mode Evict) or reported (mode Observe), by QoS class."}, []string{"qos", "mode"}),
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "early_oom_read_errors_total",
			Help: "Samples that could not be read, by source (psi, meminfo, cgroup)."}, []string{"source"}),
	}
	reg.MustRegister(m.psiUnavailable, m.pressure, m.podsPressure, m.limitedPressure, m.available, m.mode, m.settingsInvalid, m.actions, m.victims, m.readErrors)
	// Every series exists from the start, so that rate() and alerts see
	// zeros rather than nothing.
	for _, r := range detect.Reasons {
		for _, res := range []string{ResultEvicted, ResultWouldEvict, ResultNoVictim, ResultFailed, ResultBudgetExhausted} {
			m.actions.WithLabelValues(string(r), res)
		}
	}
	for _, q := range []string{"BestEffort", "Burstable", "Guaranteed", "Unknown"} {
		for _, mode := range []settings.Mode{settings.Evict, settings.Observe} {
			m.victims.WithLabelValues(q, string(mode))
		}
	}
	for _, src := range []string{"psi", "meminfo", "cgroup"} {
		m.readErrors.WithLabelValues(src)
	}
	return m
}

func (m *metrics) setMode(mode settings.Mode) {
	for _, x := range settings.Modes {
		v := 0.0
		if x == mode {
			v = 1
		}
		m.mode.WithLabelValues(string(x)).Set(v)
	}
}
