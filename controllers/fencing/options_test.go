package fencing

import (
	"testing"

	"github.com/node-manager/node-manager/hack/flagtest"
)

// TestOptionsValidate: the defaults pass; a bad value of each flag is
// refused with a message that names that flag.
func TestOptionsValidate(t *testing.T) {
	if err := NewOptions().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--fencing-margin=0s"}, []string{"--fencing-margin=0s", "must be positive"}},
		{[]string{"--fencing-agent-api-timeout=-1s"}, []string{"--fencing-agent-api-timeout=-1s"}},
		{[]string{"--fencing-agent-feed-interval=0s"}, []string{"--fencing-agent-feed-interval=0s"}},
		{[]string{"--fencing-lease-renew-interval=0s"}, []string{"--fencing-lease-renew-interval=0s"}},
		{[]string{"--fencing-interval=0s"}, []string{"--fencing-interval=0s"}},
		{[]string{"--fencing-api-view-timeout=0s"}, []string{"--fencing-api-view-timeout=0s"}},
		{[]string{"--fencing-max-nodes-per-interval=0"}, []string{"--fencing-max-nodes-per-interval=0", "no dead node is ever fenced"}},
		{[]string{"--fencing-max-percent-per-interval=101"}, []string{"--fencing-max-percent-per-interval", "0 to 100"}},
		{[]string{"--fencing-outage-percent=-1"}, []string{"--fencing-outage-percent", "0 to 100"}},
		{[]string{"--fencing-outage-min-nodes=0"}, []string{"--fencing-outage-min-nodes=0", "at least 1"}},
	} {
		o := NewOptions() // Validate is read through a closure: a method value would copy the defaults
		flagtest.Refused(t, o.AddFlags, func() error { return o.Validate() }, c.args, c.want...)
	}
}
