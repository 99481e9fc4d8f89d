package drain

import (
	"testing"

	"github.com/node-manager/node-manager/hack/flagtest"
)

// TestOptionsValidate: the defaults pass; a bad value of each flag is
// refused with a message that names that flag and its value.
func TestOptionsValidate(t *testing.T) {
	if err := NewOptions().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--eviction-retry-interval=0s"}, []string{"--eviction-retry-interval=0s", "must be positive"}},
		{[]string{"--default-drain-timeout=-1m"}, []string{"--default-drain-timeout=-1m0s", "must be positive", "nodeDrainTimeoutSecond"}},
	} {
		o := NewOptions() // Validate is read through a closure: a method value would copy the defaults
		flagtest.Refused(t, o.AddFlags, func() error { return o.Validate() }, c.args, c.want...)
	}
}
