package loop

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// Keyer names the key an object enqueues ("" for none).
type Keyer func(obj any) string

// ByName keys an object by its name (NodeGroups, NodeGroupBundles).
func ByName(obj any) string {
	if o, err := meta.Accessor(obj); err == nil {
		return o.GetName()
	}
	return ""
}

// ByLabel keys an object by the value of one of its labels (Nodes by
// their group).
func ByLabel(label string) Keyer {
	return func(obj any) string {
		if o, err := meta.Accessor(obj); err == nil {
			return o.GetLabels()[label]
		}
		return ""
	}
}

// Handler enqueues the key of every added, updated or deleted object; for
// an update both the old and the new key, so an object that moved (a node
// relabelled into another group) is looked at from both sides.
func (l *Loop) Handler(key Keyer) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if k := key(obj); k != "" {
			l.Add(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(old, cur any) { enqueue(old); enqueue(cur) },
		DeleteFunc: enqueue,
	}
}
