package templates

import (
	_ "embed"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// VersionMap says what nodes install: Kubernetes binaries per minor,
// containerd per CRI type, the sandbox image and the OS's base packages.
// The built-in map is versions.yaml; a cluster may replace entries with
// ClusterConfiguration packageSource.versions (same schema).
type VersionMap struct {
	// Kubernetes maps a minor ("1.36") to its release.
	Kubernetes map[string]KubernetesRelease `json:"kubernetes"`
	// Containerd maps a cri.type (Containerd, ContainerdV2) to its release.
	Containerd map[string]ContainerdRelease `json:"containerd"`
	// SandboxImage is the pod sandbox image containerd pins.
	SandboxImage string `json:"sandboxImage"`
	// BasePackages maps a bundle (debian, ubuntu-lts, centos) to the OS
	// packages every node gets.
	BasePackages map[string][]string `json:"basePackages"`
}

// KubernetesRelease is one Kubernetes patch release of a minor.
type KubernetesRelease struct {
	// Version is the patch release, such as 1.36.3.
	Version string `json:"version" render:"word"`
	// SHA256 of each binary per architecture; empty when not recorded.
	SHA256 KubernetesSums `json:"sha256"`
}

// KubernetesSums are the sums of the Kubernetes binaries a node installs.
type KubernetesSums struct {
	Kubelet ArchSums `json:"kubelet"`
	Kubectl ArchSums `json:"kubectl"`
}

// ContainerdRelease is one containerd release.
type ContainerdRelease struct {
	// Version such as 2.2.7.
	Version string `json:"version" render:"word"`
	// SHA256 of the release archive per architecture; empty when not recorded.
	SHA256 ArchSums `json:"sha256"`
}

// ArchSums are sha256 sums (lowercase hex) per architecture; an empty one
// is not recorded, and a node refuses to download that file.
type ArchSums struct {
	AMD64 string `json:"amd64" render:"word"`
	ARM64 string `json:"arm64" render:"word"`
}

// Bundles are the operating-system bundles nodes can run.
var Bundles = []string{"debian", "ubuntu-lts", "centos"}

// CRITypes a NodeGroup may name.
var CRITypes = []string{"Containerd", "ContainerdV2", "NotManaged"}

//go:embed versions.yaml
var builtinVersionsYAML []byte

// BuiltinVersions returns a copy of the version map compiled into the
// binary. It panics if versions.yaml is invalid, which its unit test rules out.
func BuiltinVersions() VersionMap {
	vm, err := ParseVersionMap(builtinVersionsYAML)
	if err != nil {
		panic(fmt.Sprintf("templates: versions.yaml: %v", err))
	}
	return vm
}

var (
	minorRE   = regexp.MustCompile(`^1\.[0-9]+$`)
	versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	sumRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	imageRE   = regexp.MustCompile(`^[a-z0-9][-a-z0-9._:/@]*$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][-a-z0-9+._]*$`)
)

// ParseVersionMap reads a version map strictly (unknown fields are
// errors) and checks every entry. A partial map (as an override) is valid.
func ParseVersionMap(data []byte) (VersionMap, error) {
	var vm VersionMap
	if err := yaml.UnmarshalStrict(data, &vm); err != nil {
		return VersionMap{}, err
	}
	return vm, vm.Validate()
}

// Validate checks every entry: versions match their keys, sums are sha256
// hex or empty, names are what shell scripts can carry unquoted.
func (vm VersionMap) Validate() error {
	for _, minor := range slices.Sorted(maps.Keys(vm.Kubernetes)) {
		r := vm.Kubernetes[minor]
		if !minorRE.MatchString(minor) {
			return fmt.Errorf("kubernetes: %q is not a minor version such as 1.36", minor)
		}
		if !versionRE.MatchString(r.Version) || !strings.HasPrefix(r.Version, minor+".") {
			return fmt.Errorf("kubernetes.%s.version: %q is not a patch release of %s", minor, r.Version, minor)
		}
		for what, sums := range map[string]ArchSums{"kubelet": r.SHA256.Kubelet, "kubectl": r.SHA256.Kubectl} {
			if err := sums.validate(); err != nil {
				return fmt.Errorf("kubernetes.%s.sha256.%s: %w", minor, what, err)
			}
		}
	}
	for _, cri := range slices.Sorted(maps.Keys(vm.Containerd)) {
		r := vm.Containerd[cri]
		if cri != "Containerd" && cri != "ContainerdV2" {
			return fmt.Errorf("containerd: %q is not a managed cri.type (Containerd, ContainerdV2)", cri)
		}
		if !versionRE.MatchString(r.Version) {
			return fmt.Errorf("containerd.%s.version: %q is not a version such as 2.2.9", cri, r.Version)
		}
		if major := strings.SplitN(r.Version, ".", 2)[0]; (cri == "Containerd") != (major == "1") {
			return fmt.Errorf("containerd.%s.version: %s is the wrong line (Containerd is 1.x, ContainerdV2 is 2.x)", cri, r.Version)
		}
		if err := r.SHA256.validate(); err != nil {
			return fmt.Errorf("containerd.%s.sha256: %w", cri, err)
		}
	}
	if vm.SandboxImage != "" && !imageRE.MatchString(vm.SandboxImage) {
		return fmt.Errorf("sandboxImage: %q is not an image reference", vm.SandboxImage)
	}
	for _, bundle := range slices.Sorted(maps.Keys(vm.BasePackages)) {
		if !slices.Contains(Bundles, bundle) {
			return fmt.Errorf("basePackages: %q is not a bundle (%s)", bundle, strings.Join(Bundles, ", "))
		}
		for _, p := range vm.BasePackages[bundle] {
			if !packageRE.MatchString(p) {
				return fmt.Errorf("basePackages.%s: %q is not a package name", bundle, p)
			}
		}
	}
	return nil
}

func (s ArchSums) validate() error {
	for arch, sum := range map[string]string{"amd64": s.AMD64, "arm64": s.ARM64} {
		if sum != "" && !sumRE.MatchString(sum) {
			return fmt.Errorf("%s: %q is not a sha256 sum (64 lowercase hex digits)", arch, sum)
		}
	}
	return nil
}

// Merge returns vm with the entries of override replacing its own: a
// Kubernetes minor, a containerd CRI type or a bundle's package list is
// replaced whole; a non-empty sandbox image replaces the image.
func (vm VersionMap) Merge(override VersionMap) VersionMap {
	out := VersionMap{
		Kubernetes:   maps.Clone(vm.Kubernetes),
		Containerd:   maps.Clone(vm.Containerd),
		SandboxImage: vm.SandboxImage,
		BasePackages: maps.Clone(vm.BasePackages),
	}
	if out.Kubernetes == nil {
		out.Kubernetes = map[string]KubernetesRelease{}
	}
	if out.Containerd == nil {
		out.Containerd = map[string]ContainerdRelease{}
	}
	if out.BasePackages == nil {
		out.BasePackages = map[string][]string{}
	}
	maps.Copy(out.Kubernetes, override.Kubernetes)
	maps.Copy(out.Containerd, override.Containerd)
	maps.Copy(out.BasePackages, override.BasePackages)
	if override.SandboxImage != "" {
		out.SandboxImage = override.SandboxImage
	}
	return out
}

// KubernetesMinors are the supported minors, in version order.
func (vm VersionMap) KubernetesMinors() []string {
	minors := slices.Collect(maps.Keys(vm.Kubernetes))
	slices.SortFunc(minors, func(a, b string) int {
		var am, bm int
		fmt.Sscanf(a, "1.%d", &am)
		fmt.Sscanf(b, "1.%d", &bm)
		return am - bm
	})
	return minors
}
