package framework

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/templates"
)

// Mirror is a package source on loopback in the upstream layout (what
// ClusterConfiguration packageSource.url points at), serving files a test
// adds. It counts requests.
type Mirror struct {
	URL  string
	root string

	mu       sync.Mutex
	requests []string
}

// StartMirror serves an empty mirror until the test ends.
func StartMirror(t testing.TB) *Mirror {
	t.Helper()
	m := &Mirror{root: t.TempDir()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	files := http.FileServer(http.Dir(m.root))
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.requests = append(m.requests, r.URL.Path)
		m.mu.Unlock()
		files.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	m.URL = "http://" + ln.Addr().String()
	return m
}

// Add copies a file into the mirror at path and returns its sha256.
func (m *Mirror) Add(t testing.TB, path, from string) string {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatalf("%v (make tools builds it)", err)
	}
	return m.write(t, path, data)
}

// AddTarball packs files into a release archive of containerd's layout
// (bin/<name>) at path and returns its sha256.
func (m *Mirror) AddTarball(t testing.TB, path string, files []string) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v (make tools builds it)", err)
		}
		hdr := &tar.Header{Name: "bin/" + filepath.Base(file), Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return m.write(t, path, buf.Bytes())
}

func (m *Mirror) write(t testing.TB, path string, data []byte) string {
	t.Helper()
	dest := filepath.Join(m.root, path)
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TakeRequests returns the paths requested since the last call.
func (m *Mirror) TakeRequests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.requests
	m.requests = nil
	return r
}

// PackageSource is a Mirror serving what a node downloads, built from the
// pinned modules: the kubelet and kubectl from hack/tools, a containerd
// release archive from hack/tools/containerd's binaries; Versions gives
// their sums the way an air-gapped cluster does (ClusterConfiguration
// packageSource.versions).
type PackageSource struct {
	*Mirror
	// Bin holds the binaries served (the repository's bin/).
	Bin  string
	Arch string
	// KubernetesVersion and ContainerdVersion are the pinned versions,
	// which the version map must name.
	KubernetesVersion, ContainerdVersion  string
	KubeletSum, KubectlSum, ContainerdSum string
	// Versions is the version map override naming the served files' sums.
	Versions templates.VersionMap
}

// StartPackageSource serves the pinned node binaries until the test ends.
// The test fails when the version map's default Kubernetes release or
// ContainerdV2 is not the pinned one.
func StartPackageSource(t testing.TB) *PackageSource {
	t.Helper()
	repo, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	builtin := templates.BuiltinVersions()
	p := &PackageSource{Mirror: StartMirror(t), Arch: runtime.GOARCH, Bin: filepath.Join(repo, "bin")}
	p.KubernetesVersion = builtin.Kubernetes[templates.DefaultKubernetesVersion].Version
	if pinned := pinnedVersion(t, filepath.Join(repo, "hack/tools/go.mod"), "k8s.io/kubernetes"); pinned != p.KubernetesVersion {
		t.Fatalf("the version map has Kubernetes %s, hack/tools pins %s", p.KubernetesVersion, pinned)
	}
	p.ContainerdVersion = builtin.Containerd["ContainerdV2"].Version
	if pinned := pinnedVersion(t, filepath.Join(repo, "hack/tools/containerd/go.mod"), "github.com/containerd/containerd/v2"); pinned != p.ContainerdVersion {
		t.Fatalf("the version map has containerd %s, hack/tools/containerd pins %s", p.ContainerdVersion, pinned)
	}
	p.KubeletSum = p.Add(t, "kubernetes/v"+p.KubernetesVersion+"/bin/linux/"+p.Arch+"/kubelet", filepath.Join(p.Bin, "kubelet"))
	p.KubectlSum = p.Add(t, "kubernetes/v"+p.KubernetesVersion+"/bin/linux/"+p.Arch+"/kubectl", filepath.Join(p.Bin, "kubectl"))
	p.ContainerdSum = p.AddTarball(t, "containerd/v"+p.ContainerdVersion+"/containerd-"+p.ContainerdVersion+"-linux-"+p.Arch+".tar.gz", p.ContainerdFiles())
	p.Versions = templates.VersionMap{
		Kubernetes: map[string]templates.KubernetesRelease{templates.DefaultKubernetesVersion: {
			Version: p.KubernetesVersion, SHA256: templates.KubernetesSums{Kubelet: p.Sums(p.KubeletSum), Kubectl: p.Sums(p.KubectlSum)},
		}},
		Containerd: map[string]templates.ContainerdRelease{"ContainerdV2": {Version: p.ContainerdVersion, SHA256: p.Sums(p.ContainerdSum)}},
	}
	return p
}

// ContainerdFiles are the binaries of the containerd release archive.
func (p *PackageSource) ContainerdFiles() []string {
	return []string{filepath.Join(p.Bin, "containerd"), filepath.Join(p.Bin, "containerd-shim-runc-v2"), filepath.Join(p.Bin, "ctr")}
}

// Sums is sum for this machine's architecture.
func (p *PackageSource) Sums(sum string) templates.ArchSums {
	if p.Arch == "arm64" {
		return templates.ArchSums{ARM64: sum}
	}
	return templates.ArchSums{AMD64: sum}
}

// ClusterConfiguration is a ClusterConfiguration (containerd 2 by default)
// pointing nodes at the package source url with the sums of versions, as
// an air-gapped cluster gives them, followed by extra (YAML of other
// top-level fields, may be empty).
func ClusterConfiguration(t testing.TB, url string, versions templates.VersionMap, extra string) string {
	t.Helper()
	data, err := yaml.Marshal(versions)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := range lines {
		lines[i] = "    " + lines[i]
	}
	return "apiVersion: deckhouse.io/v1\nkind: ClusterConfiguration\ndefaultCRI: ContainerdV2\npackageSource:\n  url: " + url + "\n  versions:\n" +
		strings.Join(lines, "\n") + "\n" + extra
}

// pinnedVersion reads a module's version from a go.mod.
func pinnedVersion(t testing.TB, goMod, module string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(module) + ` v(\S+)`).FindStringSubmatch(ReadFile(t, goMod))
	if m == nil {
		t.Fatalf("%s does not require %s", goMod, module)
	}
	return m[1]
}
