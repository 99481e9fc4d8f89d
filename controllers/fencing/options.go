package fencing

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Options are the fencing controller's timing, its blast-radius cap
// and its outage guard. The agents' timings must be what the fencing agents
// run with: the controller checks its margin against them (the inequality
// in apiserver/apis/deckhouse/v1/fencing_timing.go).
type Options struct {
	// Margin is added to a group's watchdog timeout: a node whose Lease has
	// not been renewed for longer is dead.
	Margin time.Duration
	// AgentAPITimeout and AgentFeedInterval are the fencing agents'
	// --api-timeout and --feed-interval; LeaseRenewInterval the kubelets'.
	AgentAPITimeout    time.Duration
	AgentFeedInterval  time.Duration
	LeaseRenewInterval time.Duration
	// Limits are the blast-radius cap and the outage guard, as Decide
	// takes them.
	Limits
}

// NewOptions are the defaults.
func NewOptions() Options {
	return Options{
		Margin:             deckhousev1.DefaultFencingMargin,
		AgentAPITimeout:    deckhousev1.DefaultFencingAgentAPITimeout,
		AgentFeedInterval:  deckhousev1.DefaultFencingAgentFeedInterval,
		LeaseRenewInterval: deckhousev1.KubeletLeaseRenewInterval,
		Limits: Limits{Interval: time.Minute, MaxNodes: 1, MaxPercent: 20, OutagePercent: 50, OutageMinNodes: 2,
			APIViewTimeout: 3 * deckhousev1.KubeletLeaseRenewInterval},
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Margin, "fencing-margin", o.Margin, "a fenced node is dead when its Lease has not been renewed for its group's watchdog timeout plus this; must exceed --fencing-lease-renew-interval + --fencing-agent-api-timeout + --fencing-agent-feed-interval, or no node is fenced")
	fs.DurationVar(&o.AgentAPITimeout, "fencing-agent-api-timeout", o.AgentAPITimeout, "the fencing agents' --api-timeout")
	fs.DurationVar(&o.AgentFeedInterval, "fencing-agent-feed-interval", o.AgentFeedInterval, "the fencing agents' --feed-interval")
	fs.DurationVar(&o.LeaseRenewInterval, "fencing-lease-renew-interval", o.LeaseRenewInterval, "how often the kubelets renew their node Leases (a quarter of nodeLeaseDurationSeconds)")
	fs.DurationVar(&o.Interval, "fencing-interval", o.Interval, "the window of the fencing blast-radius cap")
	fs.IntVar(&o.MaxNodes, "fencing-max-nodes-per-interval", o.MaxNodes, "at most this many nodes of a group are fenced per --fencing-interval (or --fencing-max-percent-per-interval of the group, if that is more)")
	fs.IntVar(&o.MaxPercent, "fencing-max-percent-per-interval", o.MaxPercent, "at most this percentage of a group's nodes is fenced per --fencing-interval (or --fencing-max-nodes-per-interval, if that is more)")
	fs.IntVar(&o.OutagePercent, "fencing-outage-percent", o.OutagePercent, "when more than this percentage of the fenced nodes has stopped renewing their Leases at once (and at least --fencing-outage-min-nodes), nobody is fenced")
	fs.IntVar(&o.OutageMinNodes, "fencing-outage-min-nodes", o.OutageMinNodes, "the outage guard holds only when at least this many fenced nodes have stopped renewing their Leases")
	fs.DurationVar(&o.APIViewTimeout, "fencing-api-view-timeout", o.APIViewTimeout, "when no node's Lease renewal has been seen for longer than this, the controller's view of the API is stale and nobody is fenced")
}

// Validate says what is wrong with them.
func (o Options) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{"--fencing-margin": o.Margin, "--fencing-agent-api-timeout": o.AgentAPITimeout,
		"--fencing-agent-feed-interval": o.AgentFeedInterval, "--fencing-lease-renew-interval": o.LeaseRenewInterval,
		"--fencing-interval": o.Interval, "--fencing-api-view-timeout": o.APIViewTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%s: must be positive", name, d))
		}
	}
	if o.MaxNodes < 1 {
		errs = append(errs, fmt.Errorf("--fencing-max-nodes-per-interval=%d: at least 1 is needed, or no dead node is ever fenced", o.MaxNodes))
	}
	if o.MaxPercent < 0 || o.MaxPercent > 100 || o.OutagePercent < 0 || o.OutagePercent > 100 {
		errs = append(errs, errors.New("--fencing-max-percent-per-interval and --fencing-outage-percent are percentages (0 to 100)"))
	}
	if o.OutageMinNodes < 1 {
		errs = append(errs, fmt.Errorf("--fencing-outage-min-nodes=%d: at least 1 is needed", o.OutageMinNodes))
	}
	return errors.Join(errs...)
}
