package approval

import "github.com/spf13/pflag"

// Options are the approval controller's settings.
type Options struct {
	// NodeName is the node this process runs on (the Deployment passes
	// spec.nodeName): while it is its group's only Ready node, it is not
	// drained for an update, as Deckhouse spares its own node.
	NodeName string
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "the node this process runs on; it is not drained while it is its group's only Ready node")
}
