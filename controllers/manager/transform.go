package manager

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// slim is every informer's transform: it drops what no controller reads
// before the object is stored, so a cache of thousands of Nodes costs
// what the controllers need. managedFields (the server-side apply
// bookkeeping, often as large as the object itself) goes from every
// object; a Node also loses status.images (the kubelet lists up to 50
// images with their digests; nothing here schedules). An update built
// from a cached object sends no managedFields, which the API server reads
// as "keep them"; Nodes are never updated whole (only patched), and their
// status is a subresource, so nothing written loses the dropped fields.
//
// The fields are dropped from a shallow copy, never in place: the object
// handed to the informer may be shared with whoever sent it (a fake
// clientset keeps what it sends, and writing to it raced with its
// readers). The copy is of the top-level struct alone; maps and slices
// stay shared, read-only as every cached object is.
func slim(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	n, isNode := obj.(*corev1.Node)
	if len(m.GetManagedFields()) == 0 && (!isNode || len(n.Status.Images) == 0) {
		return obj, nil
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return obj, nil
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	out := cp.Interface()
	if n, ok := out.(*corev1.Node); ok {
		n.Status.Images = nil
	}
	if m, err := meta.Accessor(out); err == nil {
		m.SetManagedFields(nil)
	}
	return out, nil
}
