package main

import (
	"strings"
	"testing"

	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/hack/flagtest"
)

// TestTheCommandLineStaysAsDocumented holds every flag's name, type,
// default and help to testdata/flags.golden.
func TestTheCommandLineStaysAsDocumented(t *testing.T) {
	opts, addFlags, _, _ := command()
	opts.Identity = "" // the host name's default
	flagtest.Golden(t, manager.NewFlagSet(opts, addFlags), "testdata/flags.golden")
}

// TestTheCheckSeesTheParsedFlags: the command's check reads the flags as
// parsed, not the defaults they replaced.
func TestTheCheckSeesTheParsedFlags(t *testing.T) {
	opts, addFlags, validate, _ := command()
	fs := manager.NewFlagSet(opts, addFlags)
	if err := fs.Parse([]string{"--bootstrap-timeout=0s"}); err != nil {
		t.Fatal(err)
	}
	if err := validate(); err == nil || !strings.Contains(err.Error(), "--bootstrap-timeout (0s)") {
		t.Errorf("--bootstrap-timeout=0s: %v, want it refused", err)
	}
}
