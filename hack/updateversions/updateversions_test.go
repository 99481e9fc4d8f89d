// Package updateversions_test tests hack/update-versions.sh, which
// rewrites the sums of templates/versions.yaml. It lives beside the script
// rather than in templates, whose cached test result would otherwise hang
// on this script's modification time.
package updateversions_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/node-manager/node-manager/templates"
)

// TestUpdateVersionsScriptRewritesEverySum runs hack/update-versions.sh on
// a copy of the version map, with a curl that answers each sum URL with a
// sum derived from the URL, and checks every sum was replaced by the one
// for its own file.
func TestUpdateVersionsScriptRewritesEverySum(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, d := range []string{"hack", "templates", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(from, to string, mode os.FileMode) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("../update-versions.sh", filepath.Join(dir, "hack", "update-versions.sh"), 0o755)
	copyFile("../../templates/versions.yaml", filepath.Join(dir, "templates", "versions.yaml"), 0o644)
	// curl URL...: the last argument is the URL; answer "<sha256 of URL>  name".
	fakeCurl := "#!/usr/bin/env bash\nurl=${*: -1}\nprintf '%s  file\\n' \"$(printf '%s' \"$url\" | sha256sum | cut -d' ' -f1)\"\n"
	if err := os.WriteFile(filepath.Join(dir, "bin", "curl"), []byte(fakeCurl), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "go"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(dir, "hack", "update-versions.sh"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-versions.sh: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "templates", "versions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vm, err := templates.ParseVersionMap(data)
	if err != nil {
		t.Fatalf("the rewritten map does not parse: %v\n%s", err, data)
	}
	want := func(url string) string {
		s := sha256.Sum256([]byte(url))
		return hex.EncodeToString(s[:])
	}
	check := func(what, got, url string) {
		if got != want(url) {
			t.Errorf("%s: sum %q, want the one for %s", what, got, url)
		}
	}
	for _, r := range vm.Kubernetes {
		for _, arch := range []string{"amd64", "arm64"} {
			for bin, sums := range map[string]templates.ArchSums{"kubelet": r.SHA256.Kubelet, "kubectl": r.SHA256.Kubectl} {
				got := sums.AMD64
				if arch == "arm64" {
					got = sums.ARM64
				}
				check(bin+" "+r.Version+" "+arch, got, "https://dl.k8s.io/release/v"+r.Version+"/bin/linux/"+arch+"/"+bin+".sha256")
			}
		}
	}
	for cri, r := range vm.Containerd {
		check(cri+" amd64", r.SHA256.AMD64, "https://github.com/containerd/containerd/releases/download/v"+r.Version+"/containerd-"+r.Version+"-linux-amd64.tar.gz.sha256sum")
		check(cri+" arm64", r.SHA256.ARM64, "https://github.com/containerd/containerd/releases/download/v"+r.Version+"/containerd-"+r.Version+"-linux-arm64.tar.gz.sha256sum")
	}
	if !strings.Contains(string(data), "sandboxImage:") {
		t.Error("the rest of the file was lost")
	}
}
