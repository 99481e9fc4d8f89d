package templates

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func TestBuiltinVersionMap(t *testing.T) {
	vm := BuiltinVersions()
	if err := vm.Validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(vm.KubernetesMinors(), DefaultKubernetesVersion) {
		t.Errorf("the default Kubernetes version %s is not in the version map (%v)", DefaultKubernetesVersion, vm.KubernetesMinors())
	}
	for _, cri := range []string{"Containerd", "ContainerdV2"} {
		if vm.Containerd[cri].Version == "" {
			t.Errorf("no containerd release for cri.type %s", cri)
		}
	}
	// Every upstream file has its sum, for both architectures: a node
	// refuses a download without one.
	missing := func(what string, s ArchSums) {
		if s.AMD64 == "" || s.ARM64 == "" {
			t.Errorf("%s: sha256 not recorded for every architecture: %+v", what, s)
		}
	}
	for minor, r := range vm.Kubernetes {
		missing("kubelet "+minor, r.SHA256.Kubelet)
		missing("kubectl "+minor, r.SHA256.Kubectl)
	}
	for cri, r := range vm.Containerd {
		missing("containerd "+cri, r.SHA256)
	}
	for _, bundle := range Bundles {
		if len(vm.BasePackages[bundle]) == 0 {
			t.Errorf("no base packages for bundle %s", bundle)
		}
	}
	if vm.SandboxImage == "" {
		t.Error("no sandbox image")
	}
	if got := (VersionMap{Kubernetes: map[string]KubernetesRelease{"1.9": {}, "1.10": {}, "1.36": {}}}).KubernetesMinors(); !slices.Equal(got, []string{"1.9", "1.10", "1.36"}) {
		t.Errorf("minors in version order: %v", got)
	}
}

func TestVersionMapValidation(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	good := "kubernetes:\n  \"1.40\":\n    version: 1.40.2\n    sha256: {kubelet: {amd64: " + sum + "}}\n"
	if _, err := ParseVersionMap([]byte(good)); err != nil {
		t.Fatalf("a partial map with a sum: %v", err)
	}
	for bad, want := range map[string]string{
		"kubernetes:\n  \"1.40\": {version: 1.41.0}\n":                                "not a patch release of 1.40",
		"kubernetes:\n  \"v1.40\": {version: 1.40.0}\n":                               "not a minor version",
		"kubernetes:\n  \"1.40\": {version: 1.40.0, sha256: {kubelet: {amd64: x}}}\n": "not a sha256 sum",
		"containerd:\n  ContainerdV2: {version: 1.7.1}\n":                             "wrong line",
		"containerd:\n  CRIO: {version: 1.0.0}\n":                                     "not a managed cri.type",
		"basePackages:\n  gentoo: [bash]\n":                                           "not a bundle",
		"basePackages:\n  debian: [\"rm -rf\"]\n":                                     "not a package name",
		"sandboxImage: \"a b\"\n":                                                     "not an image reference",
		"kubernetes:\n  \"1.40\": {version: 1.40.0, sha512: {}}\n":                    "unknown field",
	} {
		_, err := ParseVersionMap([]byte(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error mentioning %q", bad, err, want)
		}
	}
}

func TestClusterVersionsReplaceBuiltinEntries(t *testing.T) {
	sum := strings.Repeat("0f", 32)
	settings, err := ParseClusterConfiguration([]byte(`
packageSource:
  url: http://127.0.0.1:8080/mirror/
  versions:
    kubernetes:
      "1.36":
        version: 1.36.3
        sha256:
          kubelet: {amd64: ` + sum + `}
    containerd:
      ContainerdV2: {version: 2.2.9, sha256: {amd64: ` + sum + `}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if settings.PackageSource != (PackageSource{Kubernetes: "http://127.0.0.1:8080/mirror/kubernetes", Containerd: "http://127.0.0.1:8080/mirror/containerd"}) {
		t.Errorf("package source %+v", settings.PackageSource)
	}
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: deckhousev1.NodeGroupSpec{
		NodeType: deckhousev1.NodeTypeStatic, CRI: &deckhousev1.CRISpec{Type: deckhousev1.CRIContainerdV2},
	}}
	ctx, err := NewContext(ng, settings, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Versions.Kubernetes.SHA256.Kubelet.AMD64 != sum || ctx.Versions.Containerd.SHA256.AMD64 != sum ||
		ctx.Versions.Kubernetes.SHA256.Kubectl.AMD64 != "" || ctx.Versions.SandboxImage != BuiltinVersions().SandboxImage {
		t.Errorf("versions %+v", ctx.Versions)
	}
	// Other minors keep their built-in entries.
	if settings.Versions.Kubernetes["1.35"] != BuiltinVersions().Kubernetes["1.35"] {
		t.Error("an override of 1.36 must leave 1.35 alone")
	}

	def, err := ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	if def.PackageSource != (PackageSource{Kubernetes: DefaultKubernetesPackageSource, Containerd: DefaultContainerdPackageSource}) {
		t.Errorf("default package source %+v", def.PackageSource)
	}
	if _, err := ParseClusterConfiguration([]byte("packageSource:\n  versions:\n    kubernetes:\n      \"1.36\": {version: 1.35.0}\n")); err == nil ||
		!strings.Contains(err.Error(), "packageSource.versions") {
		t.Errorf("a bad override must be refused naming it, got %v", err)
	}
}

func TestNewContextRefusesVersionsOutsideTheMap(t *testing.T) {
	settings, err := ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, KubernetesVersion: "1.20"}}
	if _, err := NewContext(ng, settings, nil, ""); err == nil || !strings.Contains(err.Error(), "1.20 is not in the version map (supported: 1.34, 1.35, 1.36)") {
		t.Errorf("got %v", err)
	}
	ng.Spec.KubernetesVersion = ""
	ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRINotManaged}
	ctx, err := NewContext(ng, settings, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Versions.Containerd.Version != "" {
		t.Errorf("a NotManaged group gets no containerd release, got %+v", ctx.Versions.Containerd)
	}
}
