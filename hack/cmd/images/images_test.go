package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrastructurev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/images"
)

// testImages are the images the tests build: the smallest of the
// product's, and Cluster API's, from its own module and with the CA
// certificates. Every image is built the same way; make images builds all
// six. Under make test's -race the test's own work (compressing and reading
// back the layers) is slow, so it builds no more than these.
var testImages = []string{deckhousev1.EarlyOOMName, infrastructurev1alpha1.CAPIControllerManagerName}

// TestTwoBuildsOfOneCommitGiveTheSameDigestsAndPushThem builds the images
// twice, from real binaries compiled twice into two directories, and wants
// byte-identical digests; then checks what one image is made of, pushes
// the layout to a loopback registry as make push does and pulls back the
// same digests by tag and by digest.
func TestTwoBuildsOfOneCommitGiveTheSameDigestsAndPushThem(t *testing.T) {
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	info, err := gitInfo(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	// The program as make images runs it, not compiled with the test's
	// -race: compressing the layers is most of its work, and several times
	// slower instrumented.
	var outs []string
	for i := 0; i < 2; i++ {
		out := t.TempDir()
		cmd := exec.Command("go", "run", "./hack/cmd/images", "build", "-only", strings.Join(testImages, ","), "-out", out)
		cmd.Dir, cmd.Env = root, append(os.Environ(), "GOFLAGS=-trimpath")
		log, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("build %d: %v\n%s", i+1, err, log)
		}
		t.Logf("build %d:\n%s", i+1, log)
		outs = append(outs, out)
	}
	first, err := images.ReadDigests(filepath.Join(outs[0], "digests"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := images.ReadDigests(filepath.Join(outs[1], "digests"))
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(testImages) {
		t.Errorf("the digests file has %d images, want %d: %v", len(first), len(testImages), first)
	}
	for name, d := range first {
		if second[name] != d {
			t.Errorf("%s: the second build's digest %s differs from the first's %s", name, second[name], d)
		}
	}
	data, err := os.ReadFile(filepath.Join(outs[0], "digests"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^([a-z-]+ sha256:[0-9a-f]{64}\n)+$`).Match(data) {
		t.Errorf("the digests file is not `<name> sha256:<hex>` lines:\n%s", data)
	}

	built, err := images.ReadLayout(filepath.Join(outs[0], "oci"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range built {
		checkImage(t, n, info)
	}

	// make push's path: the layout, the command line, the registry.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	var out bytes.Buffer
	if err := run(ctx, []string{"push", "-layout", filepath.Join(outs[0], "oci"), "-registry", host + "/node-manager"}, &out); err != nil {
		t.Fatalf("push: %v\n%s", err, out.String())
	}
	t.Logf("push:\n%s", out.String())
	for image, d := range first {
		for _, ref := range []string{host + "/node-manager/" + image + ":" + info.Version, host + "/node-manager/" + image + "@" + d} {
			r, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := remote.Image(r)
			if err != nil {
				t.Errorf("pull %s: %v", ref, err)
				continue
			}
			if got, _ := img.Digest(); got.String() != d {
				t.Errorf("pull %s: digest %s, want %s", ref, got, d)
			}
		}
	}
}

// checkImage checks what make images promises of an image: the binary at
// the entrypoint, root's and 0755; the non-root user 64535 in /etc/passwd
// and as the image's User; CA certificates only where wanted; the labels;
// every timestamp the commit's.
func checkImage(t *testing.T, n images.Named, info buildInfo) {
	t.Helper()
	cfg, err := n.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	entrypoint := "/usr/local/bin/" + n.Name
	if !slices.Equal(cfg.Config.Entrypoint, []string{entrypoint}) {
		t.Errorf("%s: entrypoint %q, want [%s]", n.Name, cfg.Config.Entrypoint, entrypoint)
	}
	if cfg.Config.User != "64535:64535" {
		t.Errorf("%s: User %q, want 64535:64535", n.Name, cfg.Config.User)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("%s: platform %s/%s, want linux/amd64", n.Name, cfg.OS, cfg.Architecture)
	}
	for key, want := range map[string]string{images.LabelRevision: info.Revision, images.LabelVersion: info.Version, images.LabelSource: "https://github.com/node-manager/node-manager"} {
		if got := cfg.Config.Labels[key]; got != want {
			t.Errorf("%s: label %s=%q, want %q", n.Name, key, got, want)
		}
	}
	if !cfg.Created.Time.Equal(info.Created) {
		t.Errorf("%s: created %s, want the commit's time %s", n.Name, cfg.Created.Time, info.Created)
	}
	for _, h := range cfg.History {
		if !h.Created.Time.Equal(info.Created) {
			t.Errorf("%s: a history entry created %s, want %s", n.Name, h.Created.Time, info.Created)
		}
	}
	files := map[string]*tar.Header{}
	contents := map[string][]byte{}
	tr := tar.NewReader(mutate.Extract(n.Image))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: read its file system: %v", n.Name, err)
		}
		p := "/" + strings.TrimSuffix(hdr.Name, "/")
		files[p] = hdr
		if p == "/etc/passwd" || p == "/etc/group" {
			contents[p], _ = io.ReadAll(tr)
		}
		if !hdr.ModTime.Equal(info.Created) {
			t.Errorf("%s: %s modified %s, want the commit's time %s", n.Name, p, hdr.ModTime, info.Created)
		}
	}
	executables := []string{entrypoint}
	for _, b := range binaries {
		if b.name == n.Name {
			for _, c := range b.companions {
				executables = append(executables, "/usr/local/bin/"+filepath.Base(c))
			}
		}
	}
	for _, p := range executables {
		switch bin := files[p]; {
		case bin == nil:
			t.Errorf("%s: no %s in the image", n.Name, p)
		case bin.Mode != 0o755 || bin.Uid != 0 || bin.Gid != 0 || bin.Typeflag != tar.TypeReg:
			t.Errorf("%s: %s is mode %o owner %d:%d type %c, want a file of mode 755 owned by 0:0", n.Name, p, bin.Mode, bin.Uid, bin.Gid, bin.Typeflag)
		case bin.Size < 1<<20:
			t.Errorf("%s: %s is %d bytes, not a Go binary", n.Name, p, bin.Size)
		}
	}
	if !strings.Contains(string(contents["/etc/passwd"]), ":x:64535:64535:") || !strings.Contains(string(contents["/etc/group"]), ":x:64535:") {
		t.Errorf("%s: /etc/passwd and /etc/group do not name the user 64535:\n%s%s", n.Name, contents["/etc/passwd"], contents["/etc/group"])
	}
	if h := files["/tmp"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("%s: /tmp is %v, want a directory of mode 1777", n.Name, h)
	}
	_, hasCA := files[images.CACertificates]
	if wantCA := n.Name == infrastructurev1alpha1.CAPIControllerManagerName; hasCA != wantCA {
		t.Errorf("%s: has CA certificates: %t, want %t", n.Name, hasCA, wantCA)
	}
	if want := append([]string{"/etc", "/etc/group", "/etc/passwd", "/home", "/home/node-manager", "/root", "/tmp", "/usr", "/usr/local", "/usr/local/bin"}, executables...); !hasCA {
		var got []string
		for p := range files {
			got = append(got, p)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: files %q, want %q", n.Name, got, want)
		}
	}
}

// TestPushFailuresSayWhatToDo pushes to a registry that is not there, one
// that wants credentials and one that refuses the push, and wants each
// error to say which.
func TestPushFailuresSayWhatToDo(t *testing.T) {
	ctx := context.Background()
	layer, err := images.Layer([]images.File{{Path: "/hello", Mode: 0o644, Data: []byte("hello")}}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Image(images.Config{Entrypoint: []string{"/hello"}, Created: time.Unix(0, 0), Labels: map[string]string{images.LabelVersion: "v1.2.3"}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	imgs := []images.Named{{Name: "hello", Image: img}}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()

	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer auth.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			reg.ServeHTTP(w, r)
			return
		}
		http.Error(w, `{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}`, http.StatusForbidden)
	}))
	defer denied.Close()

	for _, tc := range []struct {
		what, registry string
		want           []string
	}{
		{"nothing listens", closed + "/nm", []string{"push " + closed + "/nm/hello@sha256:", "is unreachable", "connection refused", "check the address and port in REGISTRY"}},
		{"credentials wanted", strings.TrimPrefix(auth.URL, "http://") + "/nm", []string{"wants credentials", "docker login " + strings.TrimPrefix(auth.URL, "http://")}},
		{"push denied", strings.TrimPrefix(denied.URL, "http://") + "/nm", []string{"refused the push", "may not push to this repository"}},
		{"no path", "", []string{"no registry to push to", "make push REGISTRY="}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			_, err := images.Push(ctx, imgs, images.PushOptions{Registry: tc.registry})
			if err == nil {
				t.Fatal("the push succeeded")
			}
			t.Logf("%v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}

	// A registry that takes the push: the tag is the version label.
	ok := httptest.NewServer(reg)
	defer ok.Close()
	host := strings.TrimPrefix(ok.URL, "http://")
	pushed, err := images.Push(ctx, imgs, images.PushOptions{Registry: host + "/nm"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if want := host + "/nm/hello@" + d.String(); len(pushed) != 1 || pushed[0].Ref != want || pushed[0].Tag != host+"/nm/hello:v1.2.3" {
		t.Errorf("pushed %+v, want %s tagged v1.2.3", pushed, want)
	}
}

// TestTheImagesAreTheStackCmds: the product's images are the Makefile's
// STACK_CMDS, which make build and the e2e suites build.
func TestTheImagesAreTheStackCmds(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^STACK_CMDS := ((?:.*\\\n)*.*)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("no STACK_CMDS in the Makefile")
	}
	stack := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
	var product []string
	for _, b := range binaries {
		if b.module == "" {
			product = append(product, b.pkg)
			product = append(product, b.companions...)
		}
	}
	if !slices.Equal(product, stack) {
		t.Errorf("the product's images are built from %q, the Makefile's STACK_CMDS are %q: keep them one list", product, stack)
	}
}
