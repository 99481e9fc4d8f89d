package certificates

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
		{[]string{"--ca-lifetime=0s"}, []string{"--ca-lifetime (0s)", "must be positive"}},
		{[]string{"--serving-certificate-lifetime=-1h"}, []string{"--serving-certificate-lifetime (-1h0m0s)", "must be positive"}},
		{[]string{"--certificate-propagation-delay=-1s"}, []string{"--certificate-propagation-delay (-1s)", "not negative"}},
		{[]string{"--ca-lifetime=1h", "--serving-certificate-lifetime=2h"}, []string{"--serving-certificate-lifetime (2h0m0s) must not exceed --ca-lifetime (1h0m0s)"}},
		{[]string{"--serving-certificate-lifetime=30m"}, []string{"--serving-certificate-lifetime (30m0s) must exceed three times --certificate-propagation-delay (10m0s)"}},
		{[]string{"--ca-lifetime=1h", "--serving-certificate-lifetime=1h"}, []string{"--ca-lifetime (1h0m0s) must exceed six times --certificate-propagation-delay (10m0s)"}},
	} {
		o := NewOptions() // Validate is read through a closure: a method value would copy the defaults
		flagtest.Refused(t, o.AddFlags, func() error { return o.Validate() }, c.args, c.want...)
	}
}
