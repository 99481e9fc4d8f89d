package drain

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// DefaultDrainTimeout is the deadline of a drain of a node whose group
// sets no nodeDrainTimeoutSecond: a refused eviction is retried (every
// --eviction-retry-interval) for 5 minutes, after which the pods left are
// deleted (drainTimeoutPolicy Delete), as the node-manager documentation
// this project follows promises for a disruptive update.
const DefaultDrainTimeout = 5 * time.Minute

// Options are the drain controller's settings.
type Options struct {
	// EvictionRetry is how long a drain waits before evicting a pod again
	// after a PodDisruptionBudget refused it.
	EvictionRetry time.Duration
	// DrainTimeout applies to groups without nodeDrainTimeoutSecond.
	DrainTimeout time.Duration
}

// NewOptions are the defaults.
func NewOptions() Options {
	return Options{EvictionRetry: 20 * time.Second, DrainTimeout: DefaultDrainTimeout}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.EvictionRetry, "eviction-retry-interval", o.EvictionRetry, "wait before evicting a pod again after a PodDisruptionBudget refused it")
	fs.DurationVar(&o.DrainTimeout, "default-drain-timeout", o.DrainTimeout, "drain deadline for groups without nodeDrainTimeoutSecond")
}

// Validate says what is wrong with them.
func (o Options) Validate() error {
	var errs []error
	if o.EvictionRetry <= 0 {
		errs = append(errs, fmt.Errorf("--eviction-retry-interval=%s: must be positive (default 20s)", o.EvictionRetry))
	}
	if o.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--default-drain-timeout=%s: must be positive (default %s); groups set their own with nodeDrainTimeoutSecond", o.DrainTimeout, DefaultDrainTimeout))
	}
	return errors.Join(errs...)
}
