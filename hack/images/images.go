// Package images assembles container images from scratch and moves them
// between OCI image layouts and registries, with go-containerregistry doing
// the work: the layers, configs, manifests, the layout and the registry
// protocol are its. What this package adds is what node-manager's images
// are made of (a non-root user, owners, modes and timestamps fixed so that
// two builds of one commit give the same digests) and errors that say what
// to do. hack/cmd/images (make images, make push) and the e2e suites that
// serve images from a loopback registry (hack/e2e/framework) use it.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// UID and GID of the user every node-manager image runs as; the manifests'
// securityContexts name the same (runAsUser: 64535).
const (
	UID = 64535
	GID = 64535
	// User is named after the product (the heritage its objects carry).
	User = deckhousev1.HeritageNodeManager
)

// OCI annotation and label keys (github.com/opencontainers/image-spec's
// annotations.md).
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelVersion  = "org.opencontainers.image.version"
	LabelTitle    = "org.opencontainers.image.title"
	LabelDesc     = "org.opencontainers.image.description"
	// RefName names an image in an OCI layout's index: make images sets
	// it to the image's name, make push pushes it to <registry>/<name>.
	RefName = "org.opencontainers.image.ref.name"
)

// CACertificates is where Debian's ca-certificates package keeps the bundle
// of trusted CAs, and where Go's crypto/x509 looks for it on Linux.
const CACertificates = "/etc/ssl/certs/ca-certificates.crt"

// File is one entry of a layer. Owner and mode are explicit: an image's
// files must not depend on the umask or the user of the machine that built
// it. Paths are absolute in the image ("/etc/passwd").
type File struct {
	Path     string
	Mode     int64 // permission bits (and sticky bit) only
	UID, GID int
	Dir      bool
	Data     []byte
}

// Layer makes a gzip-compressed OCI layer of files with every timestamp set
// to mtime. Parent directories missing from files are added (root's, 0755).
// The tar stream is Go's archive/tar; go-containerregistry's tarball package
// compresses it (once: the compressed bytes are kept for the digest, the
// layout and the push).
func Layer(files []File, mtime time.Time) (v1.Layer, error) {
	entries := map[string]File{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			return nil, fmt.Errorf("layer: the file %q has no name", f.Path)
		}
		f.Path = p
		entries[p] = f
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if _, ok := entries[dir]; !ok {
				entries[dir] = File{Path: dir, Dir: true, Mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for p, f := range entries {
		if f.Dir && f.Data != nil {
			return nil, fmt.Errorf("layer: %s is a directory with content", p)
		}
		names = append(names, p)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		f := entries[p]
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: mtime.UTC(),
			Format:  tar.FormatPAX,
		}
		if f.Dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		} else {
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: compress: %w", err)
	}
	return layer, nil
}

// BaseLayer holds what every image has: /etc/passwd and /etc/group with
// root and the non-root user, that user's home, and /tmp.
func BaseLayer(mtime time.Time) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", User, UID, GID, User, User)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", User, GID)
	return Layer([]File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/home/" + User, Dir: true, Mode: 0o700, UID: UID, GID: GID},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	}, mtime)
}

// CALayer holds the CA bundle read from file (Debian's ca-certificates
// package installs it at CACertificates) at CACertificates in the image.
func CALayer(file string, mtime time.Time) (v1.Layer, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the CA certificates %s (Debian's ca-certificates package installs them: apt-get install ca-certificates): %w", file, err)
	}
	if !bytes.Contains(data, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("%s holds no PEM certificate; reinstall Debian's ca-certificates package (apt-get install --reinstall ca-certificates)", file)
	}
	return Layer([]File{{Path: CACertificates, Mode: 0o644, Data: data}}, mtime)
}

// Config is what an image runs and says about itself.
type Config struct {
	Entrypoint []string
	Labels     map[string]string
	Created    time.Time
	// Arch is the image's architecture (GOARCH); runtime.GOARCH when empty.
	Arch string
	// User is "uid:gid"; the non-root UID:GID when empty.
	User string
}

// Image stacks layers (base first) on an empty OCI image with cfg. Every
// timestamp is cfg.Created, so the digest depends on the layers and cfg only.
func Image(cfg Config, layers ...v1.Layer) (v1.Image, error) {
	arch := cfg.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	user := cfg.User
	if user == "" {
		user = fmt.Sprintf("%d:%d", UID, GID)
	}
	created := v1.Time{Time: cfg.Created.UTC()}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: cfg.Entrypoint,
			User:       user,
			WorkingDir: "/",
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Labels:     cfg.Labels,
		},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{Created: created, CreatedBy: "node-manager hack/images"}})
	}
	return mutate.Append(img, adds...)
}

// Sizes are an image's compressed size (what a registry stores and a node
// downloads: manifest, config and compressed layers) and its uncompressed
// size (the layers' tar streams, about what it takes on a node's disk).
type Sizes struct{ Compressed, Uncompressed int64 }

// SizesOf measures img.
func SizesOf(img v1.Image) (Sizes, error) {
	var s Sizes
	m, err := img.RawManifest()
	if err != nil {
		return s, err
	}
	c, err := img.RawConfigFile()
	if err != nil {
		return s, err
	}
	s.Compressed = int64(len(m) + len(c))
	layers, err := img.Layers()
	if err != nil {
		return s, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return s, err
		}
		s.Compressed += n
		rc, err := l.Uncompressed()
		if err != nil {
			return s, err
		}
		u, err := io.Copy(io.Discard, rc)
		_ = rc.Close()
		if err != nil {
			return s, err
		}
		s.Uncompressed += u
	}
	return s, nil
}

// MiB formats n bytes as mebibytes with one decimal.
func MiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
