package join

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/images"
)

// pauseRegistry is a loopback registry (framework.StartRegistry) serving
// one image, the pause image, for registry.k8s.io through the cluster's
// registry.mirrors: the node's containerd pulls it as it would from a
// mirror of an air-gapped cluster.
type pauseRegistry struct {
	*framework.Registry
	repository, tag string
}

// startPauseRegistry builds the pause image from the source the pinned
// k8s.io/kubernetes module ships (build/pause/linux/pause.c, with gcc
// -static as its Makefile does), with go-containerregistry, and serves it
// as repository:tag.
func startPauseRegistry(t *testing.T, repository, tag string) *pauseRegistry {
	t.Helper()
	r := &pauseRegistry{Registry: framework.StartRegistry(t), repository: repository, tag: tag}
	repo, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	list := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	list.Dir = filepath.Join(repo, "hack", "tools")
	out, err := list.Output()
	if err != nil {
		t.Fatalf("find the pinned k8s.io/kubernetes module: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "build", "pause", "linux", "pause.c")
	bin := filepath.Join(t.TempDir(), "pause")
	if out, err := exec.Command("gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v"+tag+"-node-manager-e2e", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("build the pause image's binary from %s (gcc and static glibc, Debian's gcc and libc6-dev): %v\n%s", src, err, out)
	}
	pause, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := images.Layer([]images.File{{Path: "/pause", Mode: 0o755, Data: pause}}, time.Unix(0, 0))
	if err != nil {
		t.Fatalf("the pause image's layer: %v", err)
	}
	// As upstream's pause image: the binary alone, run as 65535.
	img, err := images.Image(images.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", Created: time.Unix(0, 0)}, layer)
	if err != nil {
		t.Fatalf("the pause image: %v", err)
	}
	r.Push(t, repository, tag, img)
	return r
}

// pulled reports whether the pause image was resolved by its tag through
// the mirror.
func (r *pauseRegistry) pulled() bool { return r.Pulled(r.repository, r.tag) }
