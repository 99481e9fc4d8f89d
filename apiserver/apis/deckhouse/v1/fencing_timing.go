package v1

import "time"

// The timings the fencing agent (agents/fencing-agent, on every node of a
// fenced group) and the fencing controller (controllers/fencing, in
// node-manager-controller) must agree on. They are defined here, beside
// spec.fencing, because both binaries import this package: the agent's
// flags default to them, and the controller's flags that describe the
// agents default to the same values.
//
// The controller frees a dead node's pods only when the node's watchdog has
// surely fired, so the node no longer runs them. It calls a node dead when
// its kube-node-lease Lease has not been renewed for longer than the
// evacuation delay, the group's watchdog timeout plus the controller's
// margin. The guarantee is the inequality
//
//	evacuation delay = watchdog timeout + margin
//	                 > lease renew interval + agent API timeout + agent feed interval + watchdog timeout
//
// that is, margin > lease renew interval + agent API timeout + agent feed
// interval. Why each term: the kubelet renews the Lease every lease renew
// interval, so the node may lose the API up to that long after its last
// renewal; the agent then keeps feeding until its next check (one feed
// interval later) has timed out (one API timeout later); the watchdog fires
// one watchdog timeout after the last feed. The watchdog timeout is the
// same on both sides, so only the margin is checked against the agent's
// timings; and the watchdog timeout itself must exceed the agent's API
// timeout plus feed interval, or a node whose API answers slowly (but
// answers) is reset. The fencing controller refuses a group whose timing
// breaks either (condition FencingHeld, reason UnsafeTiming) and fences none
// of its nodes.
const (
	// DefaultFencingAgentAPITimeout bounds one API check of the fencing
	// agent (its --api-timeout); shorter than the feed interval, so a check
	// never delays the next feed (Deckhouse's KUBERNETES_API_TIMEOUT was 10 s).
	DefaultFencingAgentAPITimeout = 3 * time.Second
	// DefaultFencingAgentFeedInterval is how often the fencing agent checks
	// the API and its peers and feeds the watchdog while healthy (its
	// --feed-interval), as Deckhouse's KUBERNETES_API_CHECK_INTERVAL.
	DefaultFencingAgentFeedInterval = 5 * time.Second
	// KubeletLeaseRenewInterval is how often the kubelet renews its node's
	// Lease: a quarter of its nodeLeaseDurationSeconds, 40 s by default
	// (bashible does not change it).
	KubeletLeaseRenewInterval = 10 * time.Second
	// DefaultFencingAgentLeaseStaleAfter is how old its node's Lease may be
	// while the fencing agent keeps feeding though the API answers (its
	// --lease-stale-after): a node whose kubelet stopped renewing is fenced
	// like one cut off, and its containers may still run, so the watchdog
	// must fire first. The agent's last feed is then at most this long
	// after the last renewal and the watchdog fires one watchdog timeout
	// later, before the evacuation delay (watchdog timeout + margin) as
	// long as this is below the margin; it equals the least margin the
	// controller accepts (lease renew interval + agent API timeout + agent
	// feed interval), so it holds for every accepted margin.
	DefaultFencingAgentLeaseStaleAfter = KubeletLeaseRenewInterval + DefaultFencingAgentAPITimeout + DefaultFencingAgentFeedInterval
	// DefaultFencingMargin is what the fencing controller waits beyond a
	// group's watchdog timeout before it calls a node dead (its
	// --fencing-margin): more than the 18 s the three intervals above add
	// up to, so a node with the default 60 s watchdog is fenced 90 s after
	// its last Lease renewal.
	DefaultFencingMargin = 30 * time.Second
)
