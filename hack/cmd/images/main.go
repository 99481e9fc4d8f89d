// Command images builds node-manager's container images and pushes them:
//
//	images build [flags]   make images: an OCI image layout at <out>/oci, <out>/digests
//	images push [flags]    make push REGISTRY=<registry>/<path>
//
// Each image is built from scratch with go-containerregistry (no Docker
// daemon, no base image downloaded): a static binary compiled here
// (CGO_ENABLED=0, -trimpath, no build ID, version information from git),
// /etc/passwd and /etc/group with the non-root user 64535, Debian's CA
// certificates for the one binary that talks to servers whose CA
// node-manager does not hand it, the binary as the entrypoint, User 64535,
// the OCI labels source, revision and version, and every timestamp set to
// the commit's time, so two builds of one commit give the same digests.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage: images build [flags]   build the images into an OCI layout and a digests file
       images push [flags]    push the layout's images to a registry
images <command> -h lists the flags`

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "build":
		return runBuild(ctx, args[1:], out)
	case "push":
		return runPush(ctx, args[1:], out)
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}
