package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestEachControllersFlagsParseAndAreValidated: node-manager-controller's
// controllers' flags reach their options, and a bad one is refused at
// start, naming the flag. (A fencing margin too short for the agents is
// not: that is refused per group, on the group.)
func TestEachControllersFlagsParseAndAreValidated(t *testing.T) {
	o := NewOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("the defaults are invalid: %v", err)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--fencing-margin=1m", "--default-drain-timeout=0s", "--node-name=n1", "--cluster-api", "--fencing-agent-image=registry.example.com/fencing-agent:v1"}); err != nil {
		t.Fatal(err)
	}
	if o.Fencing.Margin != time.Minute || o.Approval.NodeName != "n1" || !o.ClusterAPI.Enabled || o.FencingAgents.Image != "registry.example.com/fencing-agent:v1" {
		t.Errorf("flags parsed to %+v", o)
	}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--default-drain-timeout") {
		t.Errorf("a zero drain timeout passed: %v", err)
	}

	o = NewOptions()
	o.Fencing.MaxNodes, o.Fencing.OutagePercent, o.Fencing.Interval = 0, 150, 0
	o.FencingAgents.GossipKeyRotationPeriod = -time.Hour
	o.Certificates.LeafLifetime = 2 * o.Certificates.CALifetime
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options passed")
	}
	for _, want := range []string{"--fencing-max-nodes-per-interval=0", "--fencing-outage-percent", "--fencing-interval=0s",
		"--fencing-gossip-key-rotation-period", "--serving-certificate-lifetime"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	o = NewOptions()
	o.Fencing.Margin = time.Second
	o.Certificates.Manage, o.Certificates.CALifetime = false, 0
	if err := o.Validate(); err != nil {
		t.Errorf("a short margin, and lifetimes of certificates not managed, are refused at start (%v); the margin must be shown on the groups instead", err)
	}
}
