package framework

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/node-manager/node-manager/hack/images"
)

// TestRegistryTellsPullsFromTheTestsOwnPushes: a push asks after the
// manifest too; only a client's pull may count as pulled.
func TestRegistryTellsPullsFromTheTestsOwnPushes(t *testing.T) {
	r := StartRegistry(t)
	l, err := images.Layer([]images.File{{Path: "/pause", Mode: 0o755, Data: []byte("pause")}}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Image(images.Config{Entrypoint: []string{"/pause"}, Created: time.Unix(0, 0)}, l)
	if err != nil {
		t.Fatal(err)
	}
	r.Push(t, "pause", "3.10", img)
	dir := filepath.Join(t.TempDir(), "oci")
	if err := images.WriteLayout(dir, []images.Named{{Name: "pause", Image: img}}); err != nil {
		t.Fatal(err)
	}
	r.PushLayout(t, dir, "mirror", "3.10")
	if r.Pulled("pause", "3.10") || r.Pulled("mirror/pause", "3.10") || len(r.Requests()) != 0 {
		t.Fatalf("the test's own pushes count as pulls: %q", r.Requests())
	}
	for _, ref := range []string{r.Host + "/pause:3.10", r.Host + "/mirror/pause:3.10"} {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Image(tag); err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
	}
	if !r.Pulled("pause", "3.10") || !r.Pulled("mirror/pause", "3.10") {
		t.Fatalf("the pulls are not recorded: %q", r.Requests())
	}
}
