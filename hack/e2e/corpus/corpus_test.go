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

// example is one object of a testdata file: a NodeGroup or a
// NodeGroupConfiguration as Deckhouse's documentation publishes it.
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

var (
	nodeGroupResource     = deckhousev1.SchemeGroupVersion.WithResource("nodegroups")
	configurationResource = deckhousev1alpha1.SchemeGroupVersion.WithResource("nodegroupconfigurations")
)

func (e *example) Kind() string { return e.Object.GetKind() }

// loadCorpus reads every testdata file: a header of comment lines, then one
// or more YAML documents. Only NodeGroup and NodeGroupConfiguration are
// expected; anything else is an error, so the corpus holds nothing the
// suite does not check.
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
			if k := u.GetKind(); k != "NodeGroup" && k != "NodeGroupConfiguration" {
				return nil, fmt.Errorf("%s: document %d is a %s; the corpus holds NodeGroups and NodeGroupConfigurations", file, i+1, k)
			}
			e := &example{File: filepath.Base(file), Source: strings.Join(header, "; "), Object: u, Published: u.GetName(), Name: u.GetName()}
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

// applyCorpus creates every example as the cluster administrator, with
// strict field validation (an unknown field is refused, never dropped):
// the NodeGroups first, so that the configurations find their groups. The
// API's answer is kept on each example; only a failure to reach the API is
// an error.
func applyCorpus(ctx context.Context, all []*example) error {
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	w := &warnings{}
	cfg.WarningHandler = w
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, kind := range []struct {
		name     string
		resource schema.GroupVersionResource
	}{{"NodeGroup", nodeGroupResource}, {"NodeGroupConfiguration", configurationResource}} {
		for _, e := range all {
			if e.Kind() != kind.name {
				continue
			}
			_, e.CreateErr = client.Resource(kind.resource).Create(ctx, e.Object, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
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
