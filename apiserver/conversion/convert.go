package conversion

import (
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Kind is one kind's conversions: its hub (storage) version and its other
// served versions.
type Kind struct {
	GroupKind schema.GroupKind
	Hub       string
	Spokes    map[string]Spoke
}

// Spoke converts one served version to and from the hub. Each function
// works on the object's content in place (apiVersion, kind and metadata
// are the caller's); every one is required.
type Spoke struct {
	// Up turns the spoke's content into the hub's.
	Up func(obj map[string]any) error
	// Down turns the hub's content into the spoke's.
	Down func(obj map[string]any) error
	// Restore copies into hub (converted up from a spoke the user changed)
	// what the spoke cannot express, from saved (the hub's content before
	// it went down): the fields only the hub has.
	Restore func(hub, saved map[string]any) error
}

// content is what a conversion changes: all but apiVersion, kind and
// metadata.
func content(obj map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range obj {
		if k != "apiVersion" && k != "kind" && k != "metadata" {
			out[k] = v
		}
	}
	return out
}

func setContent(obj, c map[string]any) {
	for k := range obj {
		if k != "apiVersion" && k != "kind" && k != "metadata" {
			delete(obj, k)
		}
	}
	for k, v := range c {
		obj[k] = v
	}
}

// Convert returns obj at version to (of obj's group), through the hub.
// obj is not changed.
func (k Kind) Convert(obj *unstructured.Unstructured, to string) (*unstructured.Unstructured, error) {
	gv, err := schema.ParseGroupVersion(obj.GetAPIVersion())
	if err != nil {
		return nil, err
	}
	from := gv.Version
	out := obj.DeepCopy()
	if from == to {
		return out, nil
	}
	if from != k.Hub {
		if err := k.up(out, from); err != nil {
			return nil, err
		}
	}
	if to != k.Hub {
		if err := k.down(out, to); err != nil {
			return nil, err
		}
	}
	out.SetAPIVersion(schema.GroupVersion{Group: k.GroupKind.Group, Version: to}.String())
	return out, nil
}

func (k Kind) spoke(version string) (Spoke, error) {
	s, ok := k.Spokes[version]
	if !ok {
		return Spoke{}, fmt.Errorf("%s: version %s is not served (served: %s and %v)", k.GroupKind, version, k.Hub, keys(k.Spokes))
	}
	return s, nil
}

func (k Kind) up(obj *unstructured.Unstructured, from string) error {
	s, err := k.spoke(from)
	if err != nil {
		return err
	}
	spoke := content(obj.Object)
	hub := deepCopy(spoke)
	if err := s.Up(hub); err != nil {
		return fmt.Errorf("%s %s: converting %s to %s: %w", k.GroupKind.Kind, obj.GetName(), from, k.Hub, err)
	}
	annotations := obj.GetAnnotations()
	if data, ok := annotations[deckhousev1.ConversionDataAnnotation]; ok {
		delete(annotations, deckhousev1.ConversionDataAnnotation)
		if len(annotations) == 0 {
			annotations = nil
		}
		obj.SetAnnotations(annotations)
		saved := map[string]any{}
		// utiljson keeps integers int64, as kube-apiserver decodes them
		// (encoding/json would make them float64, and the hub's content
		// would never compare equal to the spoke's).
		if err := utiljson.Unmarshal([]byte(data), &saved); err != nil {
			// Not ours to trust: a user may edit annotations. Convert
			// without it rather than fail every read.
			saved = nil
		}
		if saved != nil {
			mapped := deepCopy(hub)
			down := deepCopy(saved)
			if err := s.Down(down); err == nil && reflect.DeepEqual(down, spoke) {
				// Unchanged since it went down: the hub as it was.
				hub = saved
			} else if err := s.Restore(hub, saved); err != nil {
				hub = mapped
				klog.V(2).InfoS("Ignored a conversion-data annotation that does not restore", "kind", k.GroupKind.Kind, "name", obj.GetName(), "err", err.Error())
			}
			// The annotation is the writer's to edit: what it brings
			// back must pass the hub's own schema and rules (validate.go).
			whole := deepCopy(obj.Object)
			setContent(whole, hub)
			whole["apiVersion"] = schema.GroupVersion{Group: k.GroupKind.Group, Version: k.Hub}.String()
			if err := validateAt(k.GroupKind.WithVersion(k.Hub), whole); err != nil {
				hub = mapped
				klog.InfoS("Ignored a conversion-data annotation whose content the storage version refuses", "kind", k.GroupKind.Kind, "name", obj.GetName(), "err", err.Error())
			}
		}
	}
	setContent(obj.Object, hub)
	return nil
}

func (k Kind) down(obj *unstructured.Unstructured, to string) error {
	s, err := k.spoke(to)
	if err != nil {
		return err
	}
	hub := content(obj.Object)
	spoke := deepCopy(hub)
	if err := s.Down(spoke); err != nil {
		return fmt.Errorf("%s %s: converting %s to %s: %w", k.GroupKind.Kind, obj.GetName(), k.Hub, to, err)
	}
	// Keep the hub's content only when the spoke lost something of it.
	up := deepCopy(spoke)
	if err := s.Up(up); err != nil || !reflect.DeepEqual(up, hub) {
		data, err := json.Marshal(hub)
		if err != nil {
			return err
		}
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[deckhousev1.ConversionDataAnnotation] = string(data)
		obj.SetAnnotations(annotations)
	}
	setContent(obj.Object, spoke)
	return nil
}

func deepCopy(m map[string]any) map[string]any {
	return runtimeDeepCopy(m)
}

func keys(m map[string]Spoke) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
