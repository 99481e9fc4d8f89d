package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/images"
)

func runPush(ctx context.Context, args []string, out io.Writer) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("images push", flag.ContinueOnError)
	layout := fs.String("layout", filepath.Join(root, ".local", "images", "oci"), "the OCI image layout make images wrote")
	var o images.PushOptions
	fs.StringVar(&o.Registry, "registry", "", "where to push, as <registry>[:port]/<path>: image <name> goes to <registry>/<path>/<name>")
	fs.StringVar(&o.Tag, "tag", "", "the tag of every image; default: its version label")
	fs.BoolVar(&o.Insecure, "insecure", false, "plain HTTP (or unverified HTTPS) to a registry not on loopback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("images push takes no arguments, got %q", fs.Args())
	}
	o.Logf = func(format string, args ...any) { fmt.Fprintf(out, "images: "+format+"\n", args...) }
	start := time.Now()
	pushed, err := images.PushLayout(ctx, *layout, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "images: pushed %d images to %s in %.1fs\n", len(pushed), o.Registry, time.Since(start).Seconds())
	return nil
}
