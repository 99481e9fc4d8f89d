package join

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-manager/node-manager/hack/controlplane"
)

// imageRegistry is a read-only OCI distribution API on loopback serving
// one image, the pause image, for registry.k8s.io through the cluster's
// registry.mirrors: the node's containerd pulls it as it would from a
// mirror of an air-gapped cluster. It counts the requests per path.
type imageRegistry struct {
	URL string

	repository, tag string
	manifest        []byte
	blobs           map[string][]byte

	mu       sync.Mutex
	requests []string
}

// startPauseRegistry builds the pause image from the source the pinned
// k8s.io/kubernetes module ships (build/pause/linux/pause.c, with gcc
// -static as its Makefile does) and serves it as repository:tag.
func startPauseRegistry(t *testing.T, repository, tag string) *imageRegistry {
	t.Helper()
	r := &imageRegistry{repository: repository, tag: tag, blobs: map[string][]byte{}}
	r.buildPause(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(r.serve)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.URL = "http://" + ln.Addr().String()
	return r
}

func (r *imageRegistry) buildPause(t *testing.T) {
	t.Helper()
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
	if out, err := exec.Command("gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v"+r.tag+"-node-manager-e2e", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("build the pause image's binary from %s (gcc and static glibc, Debian's gcc and libc6-dev): %v\n%s", src, err, out)
	}
	pause, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(pause)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(pause); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(layer.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	config := r.addJSON(t, map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer.Bytes())}},
	})
	layerDigest := r.add(gz.Bytes())
	r.manifest, err = json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": len(r.blobs[config])},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layerDigest, "size": gz.Len()}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (r *imageRegistry) add(data []byte) string {
	d := digest(data)
	r.blobs[d] = data
	return d
}

func (r *imageRegistry) addJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return r.add(data)
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// serve answers the pull side of the distribution API: /v2/, the
// manifest by tag or digest, the blobs.
func (r *imageRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests = append(r.requests, req.Method+" "+req.URL.Path)
	r.mu.Unlock()
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(w, "read-only registry", http.StatusMethodNotAllowed)
		return
	}
	prefix := "/v2/" + r.repository + "/"
	var body []byte
	switch path := req.URL.Path; {
	case path == "/v2/" || path == "/v2":
		body = []byte("{}")
		w.Header().Set("Content-Type", "application/json")
	case path == prefix+"manifests/"+r.tag || path == prefix+"manifests/"+digest(r.manifest):
		body = r.manifest
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", digest(r.manifest))
	case strings.HasPrefix(path, prefix+"blobs/") && r.blobs[strings.TrimPrefix(path, prefix+"blobs/")] != nil:
		body = r.blobs[strings.TrimPrefix(path, prefix+"blobs/")]
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", strings.TrimPrefix(path, prefix+"blobs/"))
	default:
		http.Error(w, `{"errors":[{"code":"NAME_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if req.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// pulled reports whether the manifest was fetched (by tag) through the mirror.
func (r *imageRegistry) pulled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, req := range r.requests {
		if strings.HasSuffix(req, "/manifests/"+r.tag) {
			return true
		}
	}
	return false
}
