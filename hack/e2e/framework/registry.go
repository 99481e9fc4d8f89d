package framework

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/node-manager/node-manager/hack/images"
)

// Registry is an OCI distribution registry on loopback, in memory:
// go-containerregistry's registry package behind a handler that records
// each request but the test's own pushes, so a test can tell what a node
// pulled. Loopback is spoken
// to over plain HTTP; a node's containerd reaches it as a mirror
// (ClusterConfiguration's registry.mirrors) or by its address.
type Registry struct {
	// Host is host:port, what image references under this registry start
	// with (Host + "/pause:3.10").
	Host string
	// URL is http://Host, what a mirror's endpoints name.
	URL string

	mu       sync.Mutex
	requests []string
}

// StartRegistry starts a registry on 127.0.0.1 for the test's lifetime.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for the loopback registry: %v", err)
	}
	r := &Registry{Host: ln.Addr().String()}
	r.URL = "http://" + r.Host
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get(ownPush) == "" {
			r.mu.Lock()
			r.requests = append(r.requests, req.Method+" "+req.URL.Path)
			r.mu.Unlock()
		}
		reg.ServeHTTP(w, req)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// Push pushes img as Host/repository:tag and returns its reference by
// digest (Host/repository@sha256:...).
func (r *Registry) Push(t testing.TB, repository, tag string, img v1.Image) string {
	t.Helper()
	ref, err := name.NewTag(r.Host + "/" + repository + ":" + tag)
	if err != nil {
		t.Fatalf("image reference %s/%s:%s: %v", r.Host, repository, tag, err)
	}
	if err := remote.Write(ref, img, remote.WithContext(context.Background()), remote.WithTransport(markOwn{})); err != nil {
		t.Fatalf("push %s to the loopback registry: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Digest(d.String()).String()
}

// PushLayout pushes every image of the OCI layout at dir (make images'
// .local/images/oci) to Host/<path>/<name>, by digest and tagged tag (each
// image's version label when empty), as make push does.
func (r *Registry) PushLayout(t testing.TB, dir, path, tag string) []images.Pushed {
	t.Helper()
	pushed, err := images.PushLayout(context.Background(), dir, images.PushOptions{Registry: r.Host + "/" + path, Tag: tag, Remote: []remote.Option{remote.WithTransport(markOwn{})}})
	if err != nil {
		t.Fatalf("push the images of %s to the loopback registry: %v", dir, err)
	}
	return pushed
}

// Pulled reports whether the manifest of repository:reference was asked
// for, by HEAD or GET: containerd resolves a tag with a HEAD and then
// fetches the manifest by digest.
func (r *Registry) Pulled(repository, reference string) bool {
	path := "/v2/" + repository + "/manifests/" + reference
	for _, req := range r.Requests() {
		if strings.HasSuffix(req, " "+path) {
			return true
		}
	}
	return false
}

// Requests are the requests served so far, each as "METHOD /path".
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

// ownPush marks the requests of the test's own pushes (a push asks after
// the manifest too), which Requests and Pulled leave out.
const ownPush = "X-Node-Manager-E2e-Push"

type markOwn struct{}

func (markOwn) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(ownPush, "1")
	return http.DefaultTransport.RoundTrip(req)
}
