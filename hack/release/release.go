// Package release generates node-manager's release: one YAML file that
// installs everything a cluster needs with
//
//	kubectl apply --server-side -f node-manager.yaml
//
// It is built with kustomize (kubectl's built-in `kubectl kustomize`, from
// bin/kubectl) from manifests/ (manifests/kustomization.yaml) together with
// Cluster API's core at the version pinned in hack/tools/clusterapi: its
// CRDs and webhook configurations, which manifests/cluster-api-core adjusts
// (names, namespace, the conversion webhook upstream's patches add, the
// label node-manager's certificate controller looks for). Upstream's YAML is
// copied from the pinned module into the build directory, never into the
// repository.
//
// Every container image (and every image a flag names, such as
// node-manager-controller's --fencing-agent-image, and the same image in the
// DaemonSet admission policy's fencingAgentImage) is then pinned by
// digest: the manifests name node-manager's images by their bare names
// (bashible-apiserver, ...), and the release writes
// <registry>/<name>@sha256:<hex> from the digests file `make images`
// writes. An image without a digest, or any image left unpinned, fails
// the release.
//
// Monitoring (manifests/monitoring) needs the Prometheus operator's CRDs and
// is a second, optional artefact (BuildMonitoring); the cluster-autoscaler
// (manifests/cluster-autoscaler) a third (BuildClusterAutoscaler).
package release

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/hack/controlplane"
)

// Options say where the release's parts come from.
type Options struct {
	// Root is the repository (manifests/ is read from it).
	Root string
	// Kubectl is a kubectl with the built-in kustomize (bin/kubectl).
	Kubectl string
	// ClusterAPIModule is the directory of the pinned sigs.k8s.io/cluster-api
	// module; empty locates it (ClusterAPIModule).
	ClusterAPIModule string
	// Registry is where `make push` put the images: <registry>/<path>.
	Registry string
	// Digests maps each image's name to its digest (ReadDigests).
	Digests map[string]string
}

// clusterAPICore is the kustomization, below manifests/, that takes
// Cluster API's core from the pinned module: the module's core/config/crd
// and core/config/webhook are copied beside it as crd/ and webhook/.
const clusterAPICore = "cluster-api-core"

// imageFlags are the container flags whose value is an image, pinned as
// the containers' images are.
var imageFlags = []string{"--fencing-agent-image"}

// imageVariables are the ValidatingAdmissionPolicy variables whose
// expression is an image as a CEL string literal ("fencing-agent"), pinned
// as the containers' images are: the DaemonSet policy admits only the image
// node-manager-controller's --fencing-agent-image names, and both are
// pinned to the same digest.
var imageVariables = []string{"fencingAgentImage"}

var (
	digestRE = regexp.MustCompile(`\Asha256:[0-9a-f]{64}\z`)
	nameRE   = regexp.MustCompile(`\A[a-z0-9]+(?:[._-][a-z0-9]+)*\z`)
	// registryRE is a registry host (with an optional port) and an
	// optional path, as a reference's name before the image's own name.
	registryRE = regexp.MustCompile(`\A[a-zA-Z0-9]+(?:[.-][a-zA-Z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*\z`)
	pinnedRE   = regexp.MustCompile(`@sha256:[0-9a-f]{64}\z`)
)

// ReadDigests reads the digests file `make images` writes: one line per
// image, "<name> sha256:<hex>"; empty lines and lines starting with # are
// skipped.
func ReadDigests(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the images' digests: %w (make images writes them)", err)
	}
	digests := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || !nameRE.MatchString(fields[0]) || !digestRE.MatchString(fields[1]) {
			return nil, fmt.Errorf("%s:%d: %q is not \"<image name> sha256:<64 hex digits>\"", path, n, line)
		}
		if _, dup := digests[fields[0]]; dup {
			return nil, fmt.Errorf("%s:%d: image %s is listed twice", path, n, fields[0])
		}
		digests[fields[0]] = fields[1]
	}
	if len(digests) == 0 {
		return nil, fmt.Errorf("%s lists no image; run make images", path)
	}
	return digests, sc.Err()
}

// ClusterAPIModule is the directory and version of the pinned
// sigs.k8s.io/cluster-api module (hack/tools/clusterapi), downloaded into
// the module cache when it is not there yet.
func ClusterAPIModule(ctx context.Context, root string) (dir, version string, err error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/cluster-api")
	cmd.Dir = filepath.Join(root, "hack", "tools", "clusterapi")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var mod struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || runErr != nil || mod.Error != "" || mod.Dir == "" {
		return "", "", fmt.Errorf("locating the pinned sigs.k8s.io/cluster-api module (go mod download in hack/tools/clusterapi): %v %s %s",
			runErr, mod.Error, strings.TrimSpace(stderr.String()))
	}
	return mod.Dir, mod.Version, nil
}

// Build generates the release's objects, in kustomize's order (namespaces
// and CRDs first, webhook configurations last), every image pinned.
func Build(ctx context.Context, o Options) ([]*unstructured.Unstructured, error) {
	if err := checkRegistry(o.Registry); err != nil {
		return nil, err
	}
	module := o.ClusterAPIModule
	if module == "" {
		var err error
		if module, _, err = ClusterAPIModule(ctx, o.Root); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "node-manager-release-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	// The build directory: a copy of manifests/, Cluster API's
	// kustomizations inside manifests/cluster-api-core, and a root that
	// lists both (kustomize reads files only below the root it builds).
	manifests := filepath.Join(dir, "manifests")
	if err := copyTree(filepath.Join(o.Root, "manifests"), manifests); err != nil {
		return nil, fmt.Errorf("copying manifests/: %w", err)
	}
	for _, part := range []string{"crd", "webhook"} {
		src := filepath.Join(module, "core", "config", part)
		if err := copyTree(src, filepath.Join(manifests, clusterAPICore, part)); err != nil {
			return nil, fmt.Errorf("copying Cluster API's %s from the pinned module: %w", part, err)
		}
	}
	// kustomize's legacy order: namespaces and CRDs first, webhook
	// configurations last, so that kubectl applies each object after what
	// it needs.
	root := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nsortOptions:\n  order: legacy\n" +
		"resources:\n  - manifests\n  - manifests/" + clusterAPICore + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(root), 0o644); err != nil {
		return nil, err
	}
	objs, err := kustomize(ctx, o.Kubectl, dir)
	if err != nil {
		return nil, err
	}
	if err := Pin(objs, o.Registry, o.Digests); err != nil {
		return nil, err
	}
	return objs, nil
}

// BuildMonitoring generates the optional monitoring artefact from
// manifests/monitoring (PrometheusRules, ServiceMonitors, PodMonitors, the
// dashboard), which needs the Prometheus operator's CRDs.
func BuildMonitoring(ctx context.Context, o Options) ([]*unstructured.Unstructured, error) {
	return buildOptional(ctx, o, "monitoring")
}

// BuildClusterAutoscaler generates the optional cluster-autoscaler artefact
// from manifests/cluster-autoscaler: upstream's autoscaler, pinned by
// digest in the manifest, scaling CloudEphemeral groups.
func BuildClusterAutoscaler(ctx context.Context, o Options) ([]*unstructured.Unstructured, error) {
	return buildOptional(ctx, o, "cluster-autoscaler")
}

// buildOptional builds the optional component below manifests/dir.
func buildOptional(ctx context.Context, o Options, dir string) ([]*unstructured.Unstructured, error) {
	objs, err := kustomize(ctx, o.Kubectl, filepath.Join(o.Root, "manifests", dir))
	if err != nil {
		return nil, err
	}
	if err := Pin(objs, o.Registry, o.Digests); err != nil {
		return nil, err
	}
	return objs, nil
}

func kustomize(ctx context.Context, kubectl, dir string) ([]*unstructured.Unstructured, error) {
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	objs, err := controlplane.DecodeYAML(out)
	if err != nil {
		return nil, fmt.Errorf("reading what kubectl kustomize %s built: %w", dir, err)
	}
	return objs, nil
}

func checkRegistry(registry string) error {
	if registry == "" {
		return errors.New("no registry: set REGISTRY=<registry>/<path>, where make push put the images")
	}
	if !registryRE.MatchString(registry) {
		return fmt.Errorf("registry %q is not <host>[:<port>][/<path>] (no scheme, tag or trailing slash; the path in lowercase)", registry)
	}
	return nil
}

// Pin replaces every container image (containers, initContainers,
// ephemeralContainers of any object), every image flag (imageFlags) and
// every image variable of an admission policy (imageVariables) that
// names one of node-manager's images by its bare name with
// <registry>/<name>@<digest>. An image that is neither one of those nor
// already pinned by a sha256 digest is an error, as is an image of the
// manifests that the digests do not list; every such image is reported.
func Pin(objs []*unstructured.Unstructured, registry string, digests map[string]string) error {
	var errs []error
	pin := func(obj *unstructured.Unstructured, container, what, image string) string {
		if d, ok := digests[image]; ok {
			return registry + "/" + image + "@" + d
		}
		if pinnedRE.MatchString(image) {
			return image
		}
		where := fmt.Sprintf("%s %s", obj.GetKind(), obj.GetName())
		if ns := obj.GetNamespace(); ns != "" {
			where = fmt.Sprintf("%s %s/%s", obj.GetKind(), ns, obj.GetName())
		}
		if nameRE.MatchString(image) {
			errs = append(errs, fmt.Errorf("%s, container %s: %s %q has no digest in the images' digests (%s): build it with make images, or add it there",
				where, container, what, image, strings.Join(slices.Sorted(maps.Keys(digests)), ", ")))
		} else {
			errs = append(errs, fmt.Errorf("%s, container %s: %s %q is not pinned by digest (write it as <name>@sha256:<digest>, or name one of node-manager's images)",
				where, container, what, image))
		}
		return image
	}
	for _, obj := range objs {
		if obj.GetKind() == "ValidatingAdmissionPolicy" {
			vars, _, _ := unstructured.NestedSlice(obj.Object, "spec", "variables")
			for _, v := range vars {
				vm, ok := v.(map[string]any)
				name, _ := vm["name"].(string)
				if !ok || !slices.Contains(imageVariables, name) {
					continue
				}
				expr, _ := vm["expression"].(string)
				image, err := strconv.Unquote(strings.TrimSpace(expr))
				if err != nil || !strings.HasPrefix(strings.TrimSpace(expr), `"`) {
					errs = append(errs, fmt.Errorf("ValidatingAdmissionPolicy %s, variable %s: expression %q is not an image as a CEL string literal (\"<image>\")", obj.GetName(), name, expr))
					continue
				}
				vm["expression"] = strconv.Quote(pin(obj, "-", "policy variable "+name, image))
			}
			if err := unstructured.SetNestedSlice(obj.Object, vars, "spec", "variables"); err != nil && len(vars) > 0 {
				errs = append(errs, fmt.Errorf("ValidatingAdmissionPolicy %s: %w", obj.GetName(), err))
			}
		}
		walkContainers(obj.Object, func(c map[string]any) {
			name, _ := c["name"].(string)
			if image, ok := c["image"].(string); ok {
				c["image"] = pin(obj, name, "image", image)
			}
			for _, field := range []string{"command", "args"} {
				list, _ := c[field].([]any)
				for i, a := range list {
					arg, ok := a.(string)
					if !ok {
						continue
					}
					for _, flag := range imageFlags {
						if v, found := strings.CutPrefix(arg, flag+"="); found {
							list[i] = flag + "=" + pin(obj, name, "flag "+flag, v)
						}
					}
				}
			}
		})
	}
	return errors.Join(errs...)
}

// walkContainers calls fn with every container of obj: every element of a
// containers, initContainers or ephemeralContainers list at any depth (a
// Deployment's template, a CronJob's job template, a Pod).
func walkContainers(v any, fn func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if list, ok := child.([]any); ok && (k == "containers" || k == "initContainers" || k == "ephemeralContainers") {
				for _, c := range list {
					if cm, ok := c.(map[string]any); ok {
						fn(cm)
					}
				}
				continue
			}
			walkContainers(child, fn)
		}
	case []any:
		for _, child := range v {
			walkContainers(child, fn)
		}
	}
}

// Encode writes objects as one YAML stream, after a header comment.
func Encode(header string, objs []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString("# " + line + "\n")
	}
	for _, obj := range objs {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes(), nil
}

// copyTree copies the regular files below src to dst, writable (the module
// cache's files are read-only).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
