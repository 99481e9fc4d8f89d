package certificates

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Options: whether node-manager-controller keeps the CA, the
// serving certificates and the caBundles (controllers/certificates), and
// their lifetimes.
type Options struct {
	// Manage turns the controller on (the default; off where something
	// else, such as cert-manager or a test harness, provides them).
	Manage bool
	// CALifetime and LeafLifetime are how long a new CA and a new serving
	// certificate are valid. Each is renewed at two thirds of its life.
	CALifetime, LeafLifetime time.Duration
	// PropagationDelay is how long a change takes to reach everyone who
	// acts on it: a caBundle written to an APIService or webhook
	// configuration to kube-apiserver's caches, a serving certificate
	// written to a Secret to the pods that mount it (the kubelet's sync
	// period and Secret cache, then the server's file reload). A new CA
	// signs only once it has been trusted for that long, and an old CA
	// leaves the bundles only once the last certificate re-issued away from
	// it has been written for that long.
	PropagationDelay time.Duration
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Manage, "manage-certificates", o.Manage, "keep a CA (Secret "+deckhousev1.CertificateAuthoritySecret+"), the serving certificates of bashible-api and capi-webhook-service, and the caBundle of every APIService, webhook configuration and CRD labelled "+deckhousev1.InjectCABundleLabel+"=true that points at them; false when cert-manager (manifests/cert-manager) or something else provides them")
	fs.DurationVar(&o.CALifetime, "ca-lifetime", o.CALifetime, "lifetime of a new CA; it is rotated at two thirds of it")
	fs.DurationVar(&o.LeafLifetime, "serving-certificate-lifetime", o.LeafLifetime, "lifetime of a new serving certificate; it is renewed at two thirds of it")
	fs.DurationVar(&o.PropagationDelay, "certificate-propagation-delay", o.PropagationDelay, "how long a written caBundle takes to reach kube-apiserver and a written Secret the servers that mount it (the kubelet's sync period and Secret cache, then the file reload): a new CA signs, and an old CA leaves the bundles, only that long after the change before")
}

// Validate says what is wrong with the lifetimes: every rotation must be
// able to end before what it replaces expires.
func (o Options) Validate() error {
	switch {
	case o.CALifetime <= 0 || o.LeafLifetime <= 0 || o.PropagationDelay < 0:
		return fmt.Errorf("--ca-lifetime (%s) and --serving-certificate-lifetime (%s) must be positive, --certificate-propagation-delay (%s) not negative",
			o.CALifetime, o.LeafLifetime, o.PropagationDelay)
	case o.LeafLifetime > o.CALifetime:
		return fmt.Errorf("--serving-certificate-lifetime (%s) must not exceed --ca-lifetime (%s)", o.LeafLifetime, o.CALifetime)
	case o.LeafLifetime/3 <= o.PropagationDelay:
		return fmt.Errorf("--serving-certificate-lifetime (%s) must exceed three times --certificate-propagation-delay (%s): a certificate is renewed at two thirds of its life and its successor must reach the servers before it expires",
			o.LeafLifetime, o.PropagationDelay)
	case o.CALifetime/3 <= 2*o.PropagationDelay:
		return fmt.Errorf("--ca-lifetime (%s) must exceed six times --certificate-propagation-delay (%s): a CA is rotated at two thirds of its life, its successor is trusted for one delay before it signs, and the certificates it signs take another to reach the servers, all before the old CA expires",
			o.CALifetime, o.PropagationDelay)
	}
	return nil
}

// NewOptions are the defaults.
func NewOptions() Options {
	return Options{
		Manage:           true,
		CALifetime:       10 * 365 * 24 * time.Hour,
		LeafLifetime:     365 * 24 * time.Hour,
		PropagationDelay: 10 * time.Minute,
	}
}
