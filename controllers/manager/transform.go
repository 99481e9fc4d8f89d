package manager

import (
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
func slim(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.Status.Images = nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
