package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-manager/node-manager/agents/fencing-agent/membership"
)

// metrics are the agent's Prometheus series. None has a per-node label:
// the scrape adds the pod and node, and every label here has a fixed set
// of values.
type metrics struct {
	armed        prometheus.Gauge
	feeding      prometheus.Gauge
	apiReachable prometheus.Gauge
	maintenance  prometheus.Gauge
	membersAlive prometheus.Gauge
	membersWant  prometheus.Gauge
	// membersListed is every member the gossip lists, of the group or not.
	membersListed prometheus.Gauge
	quorum        *prometheus.GaugeVec
	feeds         prometheus.Counter
	sinceFeed     prometheus.GaugeFunc
	// keyringReadable is 1 while the group's gossip keyring can be read.
	keyringReadable prometheus.Gauge
	// rejected is what the gossip refused, one series per reason.
	rejected []prometheus.Collector
}

func newMetrics(lastFeed func() time.Time, now func() time.Time, rejected func(reason string) uint64) *metrics {
	var rej []prometheus.Collector
	for _, r := range membership.RejectedReasons {
		rej = append(rej, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fencing_agent_gossip_rejected_total",
			Help:        "Gossip messages or members refused: reason key (not encrypted with the group's keyring), member (no Node of the group, or not at its InternalIP), merge (a push/pull larger than the group), source (from an address that is no Node of the group).",
			ConstLabels: prometheus.Labels{"reason": r}},
			func() float64 { return float64(rejected(r)) }))
	}
	return &metrics{
		rejected: rej,
		armed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_armed",
			Help: "1 while the watchdog is armed (in Notify mode: while the agent watches and the Node is labelled)."}),
		feeding: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_feeding",
			Help: "1 while the agent feeds the watchdog; 0 while armed and cut off (the node will be reset) or disarmed."}),
		apiReachable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_api_reachable",
			Help: "1 when the last check of the API got an answer."}),
		maintenance: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_maintenance",
			Help: "1 while the Node carries a maintenance annotation (the watchdog stays disarmed)."}),
		membersAlive: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_members_alive",
			Help: "Members of the node's group this agent sees alive over gossip, itself included."}),
		membersListed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_gossip_members",
			Help: "Members the group's gossip lists alive, itself included, whether or not they are Nodes of the group."}),
		membersWant: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_members_expected",
			Help: "The group's expected membership N: its Nodes in the agent's last view of the API."}),
		quorum: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fencing_agent_quorum",
			Help: "1 for the current quorum state: held, lost, or group-too-small (fewer than 3 expected members: API check only)."},
			[]string{"state"}),
		feeds: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencing_agent_feeds_total",
			Help: "Writes that fed the watchdog."}),
		keyringReadable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencing_agent_gossip_keyring_readable",
			Help: "1 while the group's gossip keyring (its Secret, mounted by the kubelet) can be read; at 0 the agent does not gossip, or gossips with the keys it read last."}),
		sinceFeed: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fencing_agent_seconds_since_last_feed",
			Help: "Seconds since the watchdog was last fed; -1 before the first feed."},
			func() float64 {
				t := lastFeed()
				if t.IsZero() {
					return -1
				}
				return now().Sub(t).Seconds()
			}),
	}
}

// Collectors are every series, for registering.
func (m *metrics) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.armed, m.feeding, m.apiReachable, m.maintenance, m.membersAlive, m.membersListed, m.membersWant, m.quorum, m.feeds, m.sinceFeed, m.keyringReadable}, m.rejected...)
}

func (m *metrics) setQuorum(q membership.Quorum) {
	for _, s := range []membership.Quorum{membership.QuorumHeld, membership.QuorumLost, membership.QuorumTooSmall} {
		v := 0.0
		if s == q {
			v = 1
		}
		m.quorum.WithLabelValues(s.String()).Set(v)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
