package staticmachines

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Options are caps-controller-manager's settings of this controller.
type Options struct {
	// BootstrapTimeout: an instance Bootstrapping for longer without its
	// Node joining is cleaned and released (Deckhouse: 20 minutes).
	BootstrapTimeout time.Duration
	// CleanupTimeout: an instance Cleaning for longer is released anyway,
	// with a warning that the host may hold leftovers (Deckhouse: 10 minutes).
	CleanupTimeout time.Duration
}

// NewOptions are the defaults.
func NewOptions() Options {
	return Options{BootstrapTimeout: 20 * time.Minute, CleanupTimeout: 10 * time.Minute}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.BootstrapTimeout, "bootstrap-timeout", o.BootstrapTimeout, "a StaticInstance Bootstrapping for longer without its Node joining is cleaned and released (Event StaticInstanceBootstrapTimeoutReached)")
	fs.DurationVar(&o.CleanupTimeout, "cleanup-timeout", o.CleanupTimeout, "a StaticInstance Cleaning for longer is released anyway (Event StaticInstanceCleanupTimeoutReached)")
}

// Validate says what is wrong with them.
func (o Options) Validate() error {
	if o.BootstrapTimeout <= 0 || o.CleanupTimeout <= 0 {
		return fmt.Errorf("--bootstrap-timeout (%s) and --cleanup-timeout (%s) must be positive", o.BootstrapTimeout, o.CleanupTimeout)
	}
	return nil
}
