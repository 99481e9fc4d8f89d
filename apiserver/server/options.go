package server

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/pflag"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

// Options are bashible-apiserver's command-line options: the generic
// server's (secure serving, delegated authentication and authorization,
// the core API client) plus its own.
type Options struct {
	Generic *genericoptions.RecommendedOptions

	// TemplatesDir is layered over the built-in template tree.
	TemplatesDir string
	// BundlesNamespace holds the published bundles and the leader Lease. It
	// must be a namespace where only bashible-apiserver may write Secrets
	// (see package bundles): whoever can write there authors what nodes run.
	BundlesNamespace string
	// Identity names this replica in the leader Lease.
	Identity string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	generic := genericoptions.NewRecommendedOptions("", Codecs.LegacyCodec(bashiblev1alpha1.SchemeGroupVersion))
	// Nothing is stored and nothing is admitted: every object is computed
	// and read-only.
	generic.Etcd = nil
	generic.Admission = nil
	generic.SecureServing.BindPort = 10423
	generic.SecureServing.MinTLSVersion = "VersionTLS12"
	hostname, _ := os.Hostname()
	return &Options{Generic: generic, BundlesNamespace: bundles.PublishedNamespace, Identity: hostname}
}

// AddFlags adds every option to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Generic.AddFlags(fs)
	fs.StringVar(&o.TemplatesDir, "templates-dir", o.TemplatesDir,
		"a directory layered over the built-in template tree: its files replace built-in ones of the same path, and an empty file removes one")
	fs.StringVar(&o.BundlesNamespace, "bundles-namespace", o.BundlesNamespace,
		"namespace of the published bundle Secrets and the leader Lease; only bashible-apiserver's identity may be allowed to write Secrets there, since whoever can authors what nodes run")
	fs.StringVar(&o.Identity, "identity", o.Identity, "this replica's name in the leader Lease (default: the hostname)")
}

// Validate checks the options.
func (o *Options) Validate() error {
	errs := o.Generic.Validate()
	if o.BundlesNamespace == "" {
		errs = append(errs, errors.New("--bundles-namespace must not be empty"))
	}
	if o.Identity == "" {
		errs = append(errs, errors.New("--identity must not be empty (the hostname is unknown)"))
	}
	if o.TemplatesDir != "" {
		if info, err := os.Stat(o.TemplatesDir); err != nil || !info.IsDir() {
			errs = append(errs, fmt.Errorf("--templates-dir %q is not a readable directory", o.TemplatesDir))
		}
	}
	return errors.Join(errs...)
}

// Config turns the options into a server configuration. Without a serving
// certificate it generates a self-signed one for localhost.
func (o *Options) Config() (*Config, error) {
	if err := o.Generic.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("create a self-signed serving certificate: %w", err)
	}
	return newConfig(o)
}
