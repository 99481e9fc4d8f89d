package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// FieldManager is the server-side apply manager of everything the harness applies.
const FieldManager = "node-manager-local"

// ReadManifests reads every object from the given YAML files and
// directories (*.yaml and *.yml, not recursive, in name order, skipping
// kustomization files), in order.
func ReadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("read manifests: %w", err)
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("read manifests in %s: %w", p, err)
		}
		var names []string
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || n == "kustomization.yaml" || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			names = append(names, filepath.Join(p, n))
		}
		sort.Strings(names)
		files = append(files, names...)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifests: %w", err)
		}
		docs, err := DecodeYAML(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

// DecodeYAML splits a multi-document YAML stream into objects, skipping
// empty documents.
func DecodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			return nil, fmt.Errorf("document %d: apiVersion and kind are required", i)
		}
		objs = append(objs, obj)
	}
}

// Applier applies objects with server-side apply.
type Applier struct {
	dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	crds    apiextensionsclient.Interface
}

// NewApplier returns an applier for the cluster behind cfg (usually the admin).
func (cp *ControlPlane) NewApplier() (*Applier, error) {
	cfg := cp.AdminConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	crds, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dynamic: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)), crds: crds}, nil
}

// ApplyFiles reads manifests from paths and applies them; see Apply.
func (a *Applier) ApplyFiles(ctx context.Context, paths ...string) error {
	objs, err := ReadManifests(paths...)
	if err != nil {
		return err
	}
	return a.Apply(ctx, objs...)
}

// Apply server-side-applies each object in order. After a
// CustomResourceDefinition it waits until the CRD is Established, so later
// objects of that kind can be applied in the same call.
func (a *Applier) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	for _, obj := range objs {
		if err := a.applyOne(ctx, obj); err != nil {
			return err
		}
		if obj.GetKind() == "CustomResourceDefinition" {
			if err := a.waitEstablished(ctx, obj.GetName()); err != nil {
				return err
			}
			a.mapper.Reset()
		}
	}
	return nil
}

func (a *Applier) applyOne(ctx context.Context, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	what := fmt.Sprintf("%s %s", gvk.Kind, obj.GetName())
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return fmt.Errorf("apply %s: the server does not serve %s: %w", what, gvk, err)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	var ri dynamic.ResourceInterface = a.dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		ri = a.dynamic.Resource(mapping.Resource).Namespace(ns)
	}
	force := true
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	return nil
}

func (a *Applier) waitEstablished(ctx context.Context, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := a.crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return false, fmt.Errorf("names not accepted: %s", c.Message)
			}
			if c.Type == apiextensionsv1.Established {
				last = c.Message
				if c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s did not become Established (%s): %w", name, last, err)
	}
	return nil
}
