package fencingagents

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
		{[]string{"--fencing-agent-image="}, []string{"--fencing-agent-image is empty", "name the fencing agent's image"}},
		{[]string{"--fencing-gossip-key-rotation-period=-1h"}, []string{"--fencing-gossip-key-rotation-period=-1h0m0s", "0 rotates only on demand"}},
	} {
		o := NewOptions() // Validate is read through a closure: a method value would copy the defaults
		flagtest.Refused(t, o.AddFlags, func() error { return o.Validate() }, c.args, c.want...)
	}
}
