package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrastructurev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/images"
)

// binary is one image: the package its binary is built from.
type binary struct {
	name string
	// module is the directory of the Go module to build in, relative to the
	// repository; empty: the product module.
	module string
	pkg    string
	// versionPkg is the package whose gitVersion, gitCommit, gitTreeState
	// and buildDate variables the build sets (-X).
	versionPkg string
	// companions are packages of binaries the image carries beside its
	// entrypoint, in the same directory, each named after its package.
	companions []string
	// ca: the image carries Debian's CA certificates.
	ca          bool
	description string
}

// binaries are the images make images builds, in the order of the digests
// file. The product's five are the Makefile's STACK_CMDS (a test checks the
// two lists agree); they talk only to the kube-apiserver, with the CA of
// their ServiceAccount token, and serve with certificates they are given,
// so they carry no CA certificates. capi-controller-manager is upstream
// Cluster API's core manager from the pinned hack/tools/clusterapi module,
// which the release installs too; it connects to the API servers of
// workload clusters through kubeconfigs providers write, whose servers may
// present certificates of a public CA, so it carries them (as upstream's
// image, on distroless/static, does).
var binaries = []binary{
	{name: deckhousev1.BashibleAPIServerName, pkg: "./apiserver/cmd/bashible-apiserver", versionPkg: "k8s.io/component-base/version",
		// The render workers' binary, which the server finds beside its own.
		companions:  []string{"./apiserver/cmd/" + deckhousev1.BashibleRenderWorkerName},
		description: "node-manager's aggregated API server: renders and serves bashible bundles"},
	{name: deckhousev1.NodeManagerControllerName, pkg: "./controllers/cmd/node-manager-controller", versionPkg: "k8s.io/component-base/version",
		description: "node-manager's controllers: node groups, updates, fencing, Cluster API"},
	{name: deckhousev1.CAPSControllerManagerName, pkg: "./controllers/cmd/caps-controller-manager", versionPkg: "k8s.io/component-base/version",
		description: "Cluster API Provider Static: bootstraps static machines over SSH"},
	{name: deckhousev1.FencingAgentName, pkg: "./agents/cmd/fencing-agent", versionPkg: "k8s.io/component-base/version",
		description: "node-manager's fencing agent: feeds the node's watchdog"},
	{name: deckhousev1.EarlyOOMName, pkg: "./agents/cmd/early-oom", versionPkg: "k8s.io/component-base/version",
		description: "node-manager's early OOM killer"},
	{name: infrastructurev1alpha1.CAPIControllerManagerName, module: "hack/tools/clusterapi", pkg: "sigs.k8s.io/cluster-api/core", versionPkg: "sigs.k8s.io/cluster-api/version", ca: true,
		description: "upstream Cluster API's core manager (sigs.k8s.io/cluster-api), pinned by node-manager"},
}

// buildInfo is what the images say about where they come from.
type buildInfo struct {
	Version, Revision, Source string
	Dirty                     bool
	Created                   time.Time
}

type buildOptions struct {
	root, out string
	only      []string
	caFile    string
	arch      string
	info      buildInfo
	log       io.Writer
}

func runBuild(ctx context.Context, args []string, out io.Writer) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("images build", flag.ContinueOnError)
	o := buildOptions{root: root, log: out}
	fs.StringVar(&o.out, "out", filepath.Join(root, ".local", "images"), "output directory: the OCI layout goes to <out>/oci, the digests to <out>/digests, the binaries to <out>/bin")
	only := fs.String("only", "", "comma-separated names of the images to build (default: all)")
	fs.StringVar(&o.caFile, "ca-certificates", images.CACertificates, "the CA bundle of Debian's ca-certificates package")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "the architecture (GOARCH) to build for")
	version := fs.String("version", "", "the images' version (label and tag); default: git describe --tags, or v0.0.0-<commit time>-<commit> without a tag")
	revision := fs.String("revision", "", "the commit the images are built from; default: git rev-parse HEAD")
	source := fs.String("source", "", "the org.opencontainers.image.source label; default: https://<module path>")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("images build takes no arguments, got %q", fs.Args())
	}
	if *only != "" {
		o.only = strings.Split(*only, ",")
	}
	if o.info, err = gitInfo(ctx, root); err != nil {
		return err
	}
	if *version != "" {
		o.info.Version = *version
	}
	if *revision != "" {
		o.info.Revision = *revision
	}
	if *source != "" {
		o.info.Source = *source
	}
	_, err = build(ctx, o)
	return err
}

// build compiles the binaries and assembles their images into <out>/oci and
// <out>/digests; it returns the images in order.
func build(ctx context.Context, o buildOptions) ([]images.Named, error) {
	start := time.Now()
	var todo []binary
	for _, b := range binaries {
		if len(o.only) == 0 || slices.Contains(o.only, b.name) {
			todo = append(todo, b)
		}
	}
	for _, name := range o.only {
		if !slices.ContainsFunc(binaries, func(b binary) bool { return b.name == name }) {
			return nil, fmt.Errorf("no image is named %q; the images are %s", name, names(binaries))
		}
	}
	if o.info.Dirty {
		fmt.Fprintf(o.log, "images: the work tree has changes not committed: the images are of %s plus them, version %s\n", short(o.info.Revision), o.info.Version)
	}
	binDir := filepath.Join(o.out, "bin")
	if err := compile(ctx, o, todo, binDir); err != nil {
		return nil, err
	}
	compiled := time.Since(start)

	mtime := o.info.Created
	base, err := images.BaseLayer(mtime)
	if err != nil {
		return nil, err
	}
	var ca v1.Layer
	var built []images.Named
	for _, b := range todo {
		data, err := os.ReadFile(filepath.Join(binDir, b.name))
		if err != nil {
			return nil, fmt.Errorf("read the binary of %s: %w", b.name, err)
		}
		entrypoint := "/usr/local/bin/" + b.name
		files := []images.File{{Path: entrypoint, Mode: 0o755, Data: data}}
		for _, c := range b.companions {
			name := filepath.Base(c)
			data, err := os.ReadFile(filepath.Join(binDir, name))
			if err != nil {
				return nil, fmt.Errorf("read the binary of %s, which the image of %s carries: %w", name, b.name, err)
			}
			files = append(files, images.File{Path: "/usr/local/bin/" + name, Mode: 0o755, Data: data})
		}
		app, err := images.Layer(files, mtime)
		if err != nil {
			return nil, fmt.Errorf("the layer of %s: %w", b.name, err)
		}
		layers := []v1.Layer{base}
		if b.ca {
			if ca == nil {
				if ca, err = images.CALayer(o.caFile, mtime); err != nil {
					return nil, fmt.Errorf("the image of %s needs CA certificates: %w", b.name, err)
				}
			}
			layers = append(layers, ca)
		}
		img, err := images.Image(images.Config{
			Entrypoint: []string{entrypoint},
			Created:    mtime,
			Arch:       o.arch,
			Labels: map[string]string{
				images.LabelSource:   o.info.Source,
				images.LabelRevision: o.info.Revision,
				images.LabelVersion:  o.info.Version,
				images.LabelTitle:    b.name,
				images.LabelDesc:     b.description,
			},
		}, append(layers, app)...)
		if err != nil {
			return nil, fmt.Errorf("the image of %s: %w", b.name, err)
		}
		built = append(built, images.Named{Name: b.name, Image: img})
	}
	layout := filepath.Join(o.out, "oci")
	if err := images.WriteLayout(layout, built); err != nil {
		return nil, err
	}
	digests := filepath.Join(o.out, "digests")
	if err := images.WriteDigests(digests, built); err != nil {
		return nil, err
	}
	for _, n := range built {
		d, err := n.Image.Digest()
		if err != nil {
			return nil, err
		}
		s, err := images.SizesOf(n.Image)
		if err != nil {
			return nil, fmt.Errorf("measure the image %s: %w", n.Name, err)
		}
		fmt.Fprintf(o.log, "images: %-24s %s  %s compressed, %s uncompressed\n", n.Name, d, images.MiB(s.Compressed), images.MiB(s.Uncompressed))
	}
	fmt.Fprintf(o.log, "images: %d images of %s (version %s) in %s, their digests in %s (%.1fs: compile and link %.1fs)\n",
		len(built), short(o.info.Revision), o.info.Version, layout, digests, time.Since(start).Seconds(), compiled.Seconds())
	return built, nil
}

// compile builds the binaries static and reproducibly into dir: no cgo,
// no file system paths (-trimpath), no build ID, no VCS stamp (the version
// goes in by -X), stripped of the symbol table and DWARF (stack traces keep
// their function names and lines). The product's binaries are one go build,
// so packages compile once; each other module is one more.
func compile(ctx context.Context, o buildOptions, todo []binary, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	var modules []string
	byModule := map[string][]binary{}
	for _, b := range todo {
		if _, ok := byModule[b.module]; !ok {
			modules = append(modules, b.module)
		}
		byModule[b.module] = append(byModule[b.module], b)
	}
	for _, m := range modules {
		bs := byModule[m]
		ldflags := []string{"-s", "-w", "-buildid="}
		vpkg := bs[0].versionPkg
		version := o.info.Version
		if m != "" {
			// Another module's binary carries its own module's version.
			v, err := moduleVersion(ctx, filepath.Join(o.root, m), bs[0].pkg)
			if err != nil {
				return err
			}
			version = v
		}
		treeState := "clean"
		if o.info.Dirty {
			treeState = "dirty"
		}
		for _, b := range bs[1:] {
			if b.versionPkg != vpkg {
				return fmt.Errorf("the binaries of module %q set the version in different packages; build them apart", m)
			}
		}
		ldflags = append(ldflags,
			"-X", vpkg+".gitVersion="+version,
			"-X", vpkg+".gitCommit="+o.info.Revision,
			"-X", vpkg+".gitTreeState="+treeState,
			"-X", vpkg+".buildDate="+o.info.Created.UTC().Format(time.RFC3339))
		args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", strings.Join(ldflags, " ")}
		if len(bs) == 1 && len(bs[0].companions) == 0 {
			args = append(args, "-o", filepath.Join(dir, bs[0].name), bs[0].pkg)
		} else {
			args = append(args, "-o", dir+string(filepath.Separator))
			for _, b := range bs {
				if filepath.Base(b.pkg) != b.name {
					return fmt.Errorf("the package %s builds a binary not named %s", b.pkg, b.name)
				}
				args = append(args, b.pkg)
				args = append(args, b.companions...)
			}
		}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(o.root, m)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch, "GOFLAGS=")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = o.log, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("compile %s (go %s in %s): %w\n%s", names(bs), strings.Join(args, " "), cmd.Dir, err, stderr.String())
		}
	}
	return nil
}

func moduleVersion(ctx context.Context, dir, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.Module.Version}}", pkg)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("find the version of the module of %s in %s (go list): %w%s", pkg, dir, err, stderrOf(err))
	}
	return strings.TrimSpace(string(out)), nil
}

// gitInfo reads the version, revision and commit time of the checkout at
// root. SOURCE_DATE_EPOCH, when set, is the images' time instead of the
// commit's (reproducible-builds.org's convention).
func gitInfo(ctx context.Context, root string) (buildInfo, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s in %s: %w%s; outside a git checkout give -version and -revision, and SOURCE_DATE_EPOCH", strings.Join(args, " "), root, err, stderrOf(err))
		}
		return strings.TrimSpace(string(out)), nil
	}
	var info buildInfo
	var err error
	if info.Revision, err = git("rev-parse", "HEAD"); err != nil {
		return info, err
	}
	status, err := git("status", "--porcelain")
	if err != nil {
		return info, err
	}
	info.Dirty = status != ""
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct"); err != nil {
			return info, err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return info, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds since 1970", epoch)
	}
	info.Created = time.Unix(secs, 0).UTC()
	if tagged, err := git("describe", "--tags", "--match", "v[0-9]*", "--dirty"); err == nil {
		info.Version = tagged
	} else {
		// Go's pseudo-version: the commit's time and hash.
		commitTime, err := git("log", "-1", "--format=%ct")
		if err != nil {
			return info, err
		}
		ct, err := strconv.ParseInt(commitTime, 10, 64)
		if err != nil {
			return info, fmt.Errorf("the commit time %q of %s is not a number", commitTime, info.Revision)
		}
		info.Version = fmt.Sprintf("v0.0.0-%s-%s", time.Unix(ct, 0).UTC().Format("20060102150405"), info.Revision[:12])
		if info.Dirty {
			info.Version += "-dirty"
		}
	}
	module, err := modulePath(ctx, root)
	if err != nil {
		return info, err
	}
	info.Source = "https://" + module
	return info, nil
}

func modulePath(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m in %s: %w%s", root, err, stderrOf(err))
	}
	return strings.TrimSpace(string(out)), nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

func names(bs []binary) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.name)
	}
	return strings.Join(s, ", ")
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
