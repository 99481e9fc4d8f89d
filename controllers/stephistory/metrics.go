package stephistory

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of bashible's runs, by node_group and step (see the package
// comment for how the step label is bounded): the steps' durations, their
// retries and failures, and the runs by result.
type Metrics struct {
	Duration *prometheus.HistogramVec
	Retries  *prometheus.CounterVec
	Failures *prometheus.CounterVec
	Runs     *prometheus.CounterVec
}

// durationBuckets span a step that only checks (a tenth of a second) to
// one that hits the default step timeout (30 minutes).
var durationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "node_manager_bashible_step_duration_seconds",
			Help:    "How long a bashible step took in a run, from its first attempt to the end of its last (the delays between attempts included), as the nodes report on their Instances.",
			Buckets: durationBuckets,
		}, []string{"node_group", "step"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_bashible_step_retries_total",
			Help: "Attempts of bashible steps beyond the first (a step that fails twice and then succeeds adds 2).",
		}, []string{"node_group", "step"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_bashible_step_failures_total",
			Help: "bashible runs that failed at this step (its last attempt failed).",
		}, []string{"node_group", "step"}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_bashible_runs_total",
			Help: "bashible runs that ran steps, by result (Succeeded, Failed, Stopped).",
		}, []string{"node_group", "result"}),
	}
	reg.MustRegister(m.Duration, m.Retries, m.Failures, m.Runs)
	return m
}

// record adds one run.
func (m *Metrics) record(s RunSample) {
	m.Runs.WithLabelValues(s.Group, string(s.Result)).Inc()
	for _, st := range s.Steps {
		m.Duration.WithLabelValues(s.Group, st.Step).Observe(st.Seconds)
		if st.Retries > 0 {
			m.Retries.WithLabelValues(s.Group, st.Step).Add(float64(st.Retries))
		}
	}
	if s.Failed != "" {
		m.Failures.WithLabelValues(s.Group, s.Failed).Inc()
	}
}

// forgetGroup drops the series of a group whose bundle is gone.
func (m *Metrics) forgetGroup(group string) {
	labels := prometheus.Labels{"node_group": group}
	m.Duration.DeletePartialMatch(labels)
	m.Retries.DeletePartialMatch(labels)
	m.Failures.DeletePartialMatch(labels)
	m.Runs.DeletePartialMatch(labels)
}
