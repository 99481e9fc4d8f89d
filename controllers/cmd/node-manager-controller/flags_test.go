package main

import (
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
