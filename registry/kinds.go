package registry

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/runtime"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

func kinds() []kind {
	return []kind{
		{
			resource: "bashibles", singular: "bashible",
			newObj:  func() runtime.Object { return &bashiblev1alpha1.Bashible{} },
			newList: func() runtime.Object { return &bashiblev1alpha1.BashibleList{} },
			fill: func(obj runtime.Object, p *bundles.Published) {
				obj.(*bashiblev1alpha1.Bashible).Data = map[string]string{bashiblev1alpha1.BashibleScriptKey: p.Bashible}
			},
			setItems: func(list runtime.Object, objs []runtime.Object) {
				list.(*bashiblev1alpha1.BashibleList).Items = values[bashiblev1alpha1.Bashible](objs)
			},
			size: func(obj runtime.Object) int {
				return len(obj.(*bashiblev1alpha1.Bashible).Data[bashiblev1alpha1.BashibleScriptKey])
			},
			steps: func(runtime.Object) int { return -1 },
		},
		{
			resource: "nodegroupbundles", singular: "nodegroupbundle",
			newObj:  func() runtime.Object { return &bashiblev1alpha1.NodeGroupBundle{} },
			newList: func() runtime.Object { return &bashiblev1alpha1.NodeGroupBundleList{} },
			fill: func(obj runtime.Object, p *bundles.Published) {
				obj.(*bashiblev1alpha1.NodeGroupBundle).Data = maps.Clone(p.Steps)
			},
			setItems: func(list runtime.Object, objs []runtime.Object) {
				list.(*bashiblev1alpha1.NodeGroupBundleList).Items = values[bashiblev1alpha1.NodeGroupBundle](objs)
			},
			size: func(obj runtime.Object) int {
				n := 0
				for _, s := range obj.(*bashiblev1alpha1.NodeGroupBundle).Data {
					n += len(s)
				}
				return n
			},
			steps: func(obj runtime.Object) int { return len(obj.(*bashiblev1alpha1.NodeGroupBundle).Data) },
		},
		{
			resource: "bootstrap", singular: "bootstrap",
			newObj:  func() runtime.Object { return &bashiblev1alpha1.Bootstrap{} },
			newList: func() runtime.Object { return &bashiblev1alpha1.BootstrapList{} },
			fill: func(obj runtime.Object, p *bundles.Published) {
				obj.(*bashiblev1alpha1.Bootstrap).Bootstrap = p.Bootstrap
			},
			setItems: func(list runtime.Object, objs []runtime.Object) {
				list.(*bashiblev1alpha1.BootstrapList).Items = values[bashiblev1alpha1.Bootstrap](objs)
			},
			size:  func(obj runtime.Object) int { return len(obj.(*bashiblev1alpha1.Bootstrap).Bootstrap) },
			steps: func(runtime.Object) int { return -1 },
		},
	}
}

// listItems returns the items of one of this package's lists.
func listItems(list runtime.Object) ([]runtime.Object, error) {
	switch l := list.(type) {
	case *bashiblev1alpha1.BashibleList:
		return pointers(l.Items), nil
	case *bashiblev1alpha1.NodeGroupBundleList:
		return pointers(l.Items), nil
	case *bashiblev1alpha1.BootstrapList:
		return pointers(l.Items), nil
	default:
		return nil, fmt.Errorf("cannot print %T", list)
	}
}

// values turns objects (each a *T) into the []T a list holds.
func values[T any](objs []runtime.Object) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		out = append(out, *any(o).(*T))
	}
	return out
}

// pointers turns a list's items into objects.
func pointers[T any, PT interface {
	*T
	runtime.Object
}](items []T) []runtime.Object {
	out := make([]runtime.Object, 0, len(items))
	for i := range items {
		out = append(out, PT(&items[i]))
	}
	return out
}
