package staticmachines

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
		{[]string{"--bootstrap-timeout=0s"}, []string{"--bootstrap-timeout (0s)", "must be positive"}},
		{[]string{"--cleanup-timeout=-1m"}, []string{"--cleanup-timeout (-1m0s)", "must be positive"}},
	} {
		o := NewOptions() // Validate is read through a closure: a method value would copy the defaults
		flagtest.Refused(t, o.AddFlags, func() error { return o.Validate() }, c.args, c.want...)
	}
}
