package images

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Named is an image and the name it goes by: its repository under a
// registry, its ref.name in a layout, its line in a digests file.
type Named struct {
	Name  string
	Image v1.Image
}

// WriteLayout writes imgs as a new OCI image layout at dir (replacing what
// was there), each named by its ref.name annotation. The layout is written
// next to dir and renamed into place, so a failed build leaves the previous
// one whole.
func WriteLayout(dir string, imgs []Named) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create the directory of the image layout %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".new-")
	if err != nil {
		return fmt.Errorf("create the image layout next to %s: %w", dir, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("create the image layout %s: %w", tmp, err)
	}
	for _, n := range imgs {
		if err := p.AppendImage(n.Image, layout.WithAnnotations(map[string]string{RefName: n.Name})); err != nil {
			return fmt.Errorf("write the image %s into the layout %s (is the disk full?): %w", n.Name, tmp, err)
		}
	}
	// MkdirTemp made it 0700; the layout is for anyone to read.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("make the image layout %s readable: %w", tmp, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the previous image layout %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("move the image layout into %s: %w", dir, err)
	}
	return nil
}

// ReadLayout returns the images of the OCI layout at dir in its order, each
// named by its ref.name annotation.
func ReadLayout(dir string) ([]Named, error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, fmt.Errorf("no OCI image layout at %s (%w): build the images first (make images)", dir, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read the OCI image layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read the index of the OCI image layout %s: %w", dir, err)
	}
	var out []Named
	for _, d := range m.Manifests {
		name := d.Annotations[RefName]
		if name == "" {
			return nil, fmt.Errorf("the OCI image layout %s lists %s without a %s annotation: rebuild it with make images", dir, d.Digest, RefName)
		}
		if !d.MediaType.IsImage() {
			return nil, fmt.Errorf("the OCI image layout %s lists %s (%s) as %s, which is not an image: rebuild it with make images", dir, name, d.Digest, d.MediaType)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read the image %s (%s) of the OCI image layout %s: %w", name, d.Digest, dir, err)
		}
		out = append(out, Named{Name: name, Image: img})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the OCI image layout %s holds no image: build the images first (make images)", dir)
	}
	return out, nil
}

// WriteDigests writes one line `<name> sha256:<hex>` per image, in order.
// make release reads exactly this format.
func WriteDigests(file string, imgs []Named) error {
	var b strings.Builder
	for _, n := range imgs {
		d, err := n.Image.Digest()
		if err != nil {
			return fmt.Errorf("digest of the image %s: %w", n.Name, err)
		}
		fmt.Fprintf(&b, "%s %s\n", n.Name, d)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write the digests file %s: %w", file, err)
	}
	return nil
}

// ReadDigests reads a file WriteDigests wrote: name → sha256:<hex>.
func ReadDigests(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read the digests file %s (%w): build the images first (make images)", file, err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 || !strings.HasPrefix(fields[1], "sha256:") {
			return nil, fmt.Errorf("%s:%d: want `<name> sha256:<hex>`, got %q", file, line, sc.Text())
		}
		if _, err := v1.NewHash(fields[1]); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		out[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the digests file %s: %w", file, err)
	}
	return out, nil
}
