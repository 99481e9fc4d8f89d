package manager

import (
	"strings"
	"testing"
)

func TestValidateExplains(t *testing.T) {
	o := NewOptions()
	o.Identity, o.Workers, o.RenewDeadline = "", 0, o.LeaseDuration
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options passed")
	}
	for _, want := range []string{"--identity", "--workers=0", "--leader-elect-renew-deadline"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if err := NewOptions().Validate(); err != nil && !strings.Contains(err.Error(), "--identity") {
		t.Errorf("defaults are invalid: %v", err)
	}
}
