package controllers

import (
	"errors"

	"github.com/spf13/pflag"

	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/controllers/certificates"
	"github.com/node-manager/node-manager/controllers/clusterapi"
	"github.com/node-manager/node-manager/controllers/drain"
	"github.com/node-manager/node-manager/controllers/fencing"
	"github.com/node-manager/node-manager/controllers/fencingagents"
)

// Options are the settings of node-manager-controller's controllers, each
// owned by its controller's package (Options, AddFlags, Validate, as
// kube-controller-manager keeps one options file per controller);
// manager.Options keeps the process's own (connection, leader election,
// /metrics).
type Options struct {
	Approval      approval.Options
	Drain         drain.Options
	Fencing       fencing.Options
	FencingAgents fencingagents.Options
	ClusterAPI    clusterapi.Options
	Certificates  certificates.Options
}

// NewOptions are the defaults.
func NewOptions() *Options {
	return &Options{
		Drain:         drain.NewOptions(),
		Fencing:       fencing.NewOptions(),
		FencingAgents: fencingagents.NewOptions(),
		Certificates:  certificates.NewOptions(),
		ClusterAPI:    clusterapi.NewOptions(),
	}
}

// AddFlags registers every controller's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Approval.AddFlags(fs)
	o.Drain.AddFlags(fs)
	o.Fencing.AddFlags(fs)
	o.FencingAgents.AddFlags(fs)
	o.ClusterAPI.AddFlags(fs)
	o.Certificates.AddFlags(fs)
}

// Validate checks every controller's options; the certificates' only when
// the certificates controller runs.
func (o *Options) Validate() error {
	errs := []error{o.Drain.Validate(), o.Fencing.Validate(), o.FencingAgents.Validate(), o.ClusterAPI.Validate()}
	if o.Certificates.Manage {
		errs = append(errs, o.Certificates.Validate())
	}
	return errors.Join(errs...)
}
