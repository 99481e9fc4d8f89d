package conversion

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

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
	// Own are the fields (dotted paths below the object's root) that the
	// spoke has and the hub has no place for. Up drops them; the
	// conversion keeps them in the OlderVersionFieldsAnnotation under the
	// spoke's version going up and gives them back going down to it, so
	// they survive storage without reaching the hub's content.
	Own []string
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
	spoke := deepCopy(content(obj.Object))
	kept := takeOwn(spoke, s.Own)
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
	if len(s.Own) > 0 {
		keepOwn(obj, from, kept)
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
	if len(s.Own) > 0 {
		k.restoreOwn(obj, to, s.Own, spoke)
	}
	setContent(obj.Object, spoke)
	return nil
}

// takeOwn removes the paths own from content and returns them, in the
// shape of the object ({"spec":{"field":...}}); nil when none was set.
func takeOwn(content map[string]any, own []string) map[string]any {
	var kept map[string]any
	for _, p := range own {
		v, ok := getPath(content, p)
		if !ok {
			continue
		}
		if kept == nil {
			kept = map[string]any{}
		}
		setPathCreating(kept, p, v)
		deletePath(content, p)
	}
	return kept
}

// olderVersionFields is obj's OlderVersionFieldsAnnotation: the fields
// kept for each older version. ok is false when the annotation is absent
// or is not such an object (a writer may edit it).
func olderVersionFields(obj *unstructured.Unstructured) (map[string]any, bool) {
	data, ok := obj.GetAnnotations()[deckhousev1.OlderVersionFieldsAnnotation]
	if !ok {
		return nil, false
	}
	entries := map[string]any{}
	if err := utiljson.Unmarshal([]byte(data), &entries); err != nil {
		klog.V(2).InfoS("Ignored an older-version-fields annotation that is not a JSON object", "kind", obj.GetKind(), "name", obj.GetName(), "err", err.Error())
		return nil, false
	}
	return entries, true
}

// setOlderVersionFields writes entries into obj's annotation, removing the
// annotation when there are none.
func setOlderVersionFields(obj *unstructured.Unstructured, entries map[string]any) {
	annotations := obj.GetAnnotations()
	if len(entries) == 0 {
		delete(annotations, deckhousev1.OlderVersionFieldsAnnotation)
		if len(annotations) == 0 {
			annotations = nil
		}
		obj.SetAnnotations(annotations)
		return
	}
	data, err := json.Marshal(entries)
	if err != nil {
		// Decoded JSON always encodes; keep what is there rather than fail.
		klog.ErrorS(err, "Encoding the older-version-fields annotation", "kind", obj.GetKind(), "name", obj.GetName())
		return
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[deckhousev1.OlderVersionFieldsAnnotation] = string(data)
	obj.SetAnnotations(annotations)
}

// keepOwn records, going up from version, the fields of that version the
// hub cannot hold (kept, nil for none), replacing what the annotation held
// for that version and leaving the other versions' entries.
func keepOwn(obj *unstructured.Unstructured, version string, kept map[string]any) {
	entries, ok := olderVersionFields(obj)
	if !ok {
		if kept == nil {
			return
		}
		entries = map[string]any{}
	}
	delete(entries, version)
	if kept != nil {
		entries[version] = kept
	}
	setOlderVersionFields(obj, entries)
}

// restoreOwn gives spoke (obj's content converted down to version) back
// the fields of that version kept in obj's annotation, and takes them out
// of the annotation of the object read at that version (they are in its
// content now; written back, keepOwn records them again). The annotation
// is the writer's to edit: fields that would make the object one the
// version's schema refuses are not given back.
func (k Kind) restoreOwn(obj *unstructured.Unstructured, version string, own []string, spoke map[string]any) {
	entries, ok := olderVersionFields(obj)
	if !ok {
		return
	}
	entry, _ := entries[version].(map[string]any)
	delete(entries, version)
	setOlderVersionFields(obj, entries)
	if entry == nil {
		return
	}
	restored := deepCopy(spoke)
	for _, p := range own {
		v, ok := getPath(entry, p)
		if !ok {
			continue
		}
		if _, ok := getPath(restored, p[:strings.LastIndex(p, ".")]); !ok {
			// What held it is gone (a writer at another version removed it).
			continue
		}
		setPath(restored, p, runtimeDeepCopyValue(v))
	}
	gvk := k.GroupKind.WithVersion(version)
	whole := func(c map[string]any) map[string]any {
		w := deepCopy(obj.Object)
		setContent(w, c)
		w["apiVersion"] = gvk.GroupVersion().String()
		return w
	}
	if err := validateAt(gvk, whole(restored)); err != nil && validateAt(gvk, whole(spoke)) == nil {
		klog.InfoS("Ignored an older-version-fields annotation whose fields the version refuses", "kind", k.GroupKind.Kind, "name", obj.GetName(), "version", version, "err", err.Error())
		return
	}
	for key := range spoke {
		delete(spoke, key)
	}
	for key, v := range restored {
		spoke[key] = v
	}
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
