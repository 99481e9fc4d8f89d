package fencingagents

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Options are the fencing agents' DaemonSets' settings.
type Options struct {
	// Image is the image of the fencing agents' DaemonSets.
	Image string
	// GossipKeyRotationPeriod is how old a fenced group's gossip key gets
	// before it is rotated (0: only on demand).
	GossipKeyRotationPeriod time.Duration
}

// NewOptions are the defaults.
func NewOptions() Options {
	return Options{
		// The image's name as the manifests' kustomization names it (a
		// kustomize images transformer, or the flag, sets the real one).
		Image:                   deckhousev1.FencingAgentName,
		GossipKeyRotationPeriod: 30 * 24 * time.Hour,
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Image, "fencing-agent-image", o.Image, "image of the fencing agents' DaemonSets, one per group with spec.fencing")
	fs.DurationVar(&o.GossipKeyRotationPeriod, "fencing-gossip-key-rotation-period", o.GossipKeyRotationPeriod, "rotate a fenced group's gossip key once it is this old (0: only when its Secret carries node-manager.deckhouse.io/rotate-gossip-key)")
}

// Validate says what is wrong with them.
func (o Options) Validate() error {
	if o.Image == "" {
		return fmt.Errorf("--fencing-agent-image is empty: name the fencing agent's image")
	}
	if o.GossipKeyRotationPeriod < 0 {
		return fmt.Errorf("--fencing-gossip-key-rotation-period=%s: must not be negative (0 rotates only on demand)", o.GossipKeyRotationPeriod)
	}
	return nil
}
