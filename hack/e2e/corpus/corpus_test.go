package corpus

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// example is one object of a testdata file: a NodeGroup,
// NodeGroupConfiguration or NodeUser as Deckhouse's documentation
// publishes it, at the API version it publishes it.
type example struct {
	// File is the testdata file, Source its header (page and section).
	File, Source string
	// Object is the document as published.
	Object *unstructured.Unstructured
	// Published is the object's name on the page; Name is what it is
	// created as: the same, unless an earlier example of the corpus took
	// it (two pages publish "worker", a page publishes install-cuda.sh for
	// Ubuntu and for CentOS), then with "-2", "-3"... before a ".sh".
	Published, Name string
	// CreateErr is the API's answer to the create; Warnings what it warned.
	CreateErr error
	Warnings  []string
}

// kinds are the kinds the corpus holds, in the order they are created
// (the groups first, so that configurations and users find them), with
// their resource and their storage version: an example at another version
// goes through the conversion webhook, so it is created once
// bashible-apiserver serves it.
var kinds = []struct {
	Kind, Resource, Storage string
}{
	{"NodeGroup", "nodegroups", deckhousev1.SchemeGroupVersion.Version},
	{"NodeGroupConfiguration", "nodegroupconfigurations", deckhousev1alpha1.SchemeGroupVersion.Version},
	{"NodeUser", "nodeusers", deckhousev1.SchemeGroupVersion.Version},
}

// resource is where e is created: its kind's resource at the version the
// example is published at.
func (e *example) resource() (schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(e.Object.GetAPIVersion())
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("%s: %w", e.File, err)
	}
	for _, k := range kinds {
		if k.Kind == e.Kind() {
			return gv.WithResource(k.Resource), nil
		}
	}
	return schema.GroupVersionResource{}, fmt.Errorf("%s: the corpus holds no %s", e.File, e.Kind())
}

// atStorageVersion is whether e is published at its kind's storage
// version, which kube-apiserver stores without a conversion.
func (e *example) atStorageVersion() bool {
	for _, k := range kinds {
		if k.Kind == e.Kind() {
			return e.Object.GetAPIVersion() == deckhousev1.SchemeGroupVersion.Group+"/"+k.Storage
		}
	}
	return false
}

func (e *example) Kind() string { return e.Object.GetKind() }

// loadCorpus reads every testdata file: a header of comment lines, then one
// or more YAML documents. Only the kinds of kinds are expected; anything
// else is an error, so the corpus holds nothing the suite does not check.
func loadCorpus(dir string) ([]*example, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no examples in %s", dir)
	}
	slices.Sort(files)
	taken := map[string]int{}
	var out []*example
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		var header []string
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(line, "# ") {
				break
			}
			header = append(header, strings.TrimPrefix(line, "# "))
		}
		if len(header) == 0 || !strings.HasPrefix(header[0], "Source: ") {
			return nil, fmt.Errorf("%s: the file must start with a header naming its source (# Source: ...)", file)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
			}
			if obj == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			e := &example{File: filepath.Base(file), Source: strings.Join(header, "; "), Object: u, Published: u.GetName(), Name: u.GetName()}
			if _, err := e.resource(); err != nil {
				return nil, fmt.Errorf("document %d: %w", i+1, err)
			}
			key := e.Kind() + "/" + e.Published
			if n := taken[key]; n > 0 {
				e.Name = renamed(e.Published, n+1)
				u.SetName(e.Name)
			}
			taken[key]++
			out = append(out, e)
		}
	}
	return out, nil
}

// renamed is name with "-n" before a trailing ".sh".
func renamed(name string, n int) string {
	base, sh := strings.CutSuffix(name, ".sh")
	if sh {
		return fmt.Sprintf("%s-%d.sh", base, n)
	}
	return fmt.Sprintf("%s-%d", base, n)
}

// warnings collects what the API warns about, per request.
type warnings struct {
	mu   sync.Mutex
	last []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = append(w.last, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.last
	w.last = nil
	return out
}

// applyCorpus creates the examples for which which holds as the cluster
// administrator, at the version each is published at, with strict field
// validation (an unknown field is refused, never dropped), kind by kind in
// the order of kinds. The API's answer is kept on each example; only a
// failure to reach the API is an error.
func applyCorpus(ctx context.Context, all []*example, which func(*example) bool) error {
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	w := &warnings{}
	cfg.WarningHandler = w
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, kind := range kinds {
		for _, e := range all {
			if e.Kind() != kind.Kind || !which(e) {
				continue
			}
			resource, err := e.resource()
			if err != nil {
				return err
			}
			_, e.CreateErr = client.Resource(resource).Create(ctx, e.Object, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			e.Warnings = w.take()
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// ofKind are the examples of a kind.
func ofKind(kind string) []*example {
	var out []*example
	for _, e := range examples {
		if e.Kind() == kind {
			out = append(out, e)
		}
	}
	return out
}
