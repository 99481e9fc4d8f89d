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
				l := list.(*bashiblev1alpha1.BashibleList)
				l.Items = make([]bashiblev1alpha1.Bashible, 0, len(objs))
				for _, o := range objs {
					l.Items = append(l.Items, *o.(*bashiblev1alpha1.Bashible))
				}
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
				l := list.(*bashiblev1alpha1.NodeGroupBundleList)
				l.Items = make([]bashiblev1alpha1.NodeGroupBundle, 0, len(objs))
				for _, o := range objs {
					l.Items = append(l.Items, *o.(*bashiblev1alpha1.NodeGroupBundle))
				}
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
				l := list.(*bashiblev1alpha1.BootstrapList)
				l.Items = make([]bashiblev1alpha1.Bootstrap, 0, len(objs))
				for _, o := range objs {
					l.Items = append(l.Items, *o.(*bashiblev1alpha1.Bootstrap))
				}
			},
			size:  func(obj runtime.Object) int { return len(obj.(*bashiblev1alpha1.Bootstrap).Bootstrap) },
			steps: func(runtime.Object) int { return -1 },
		},
	}
}

// listItems returns the items of one of this package's lists.
func listItems(list runtime.Object) ([]runtime.Object, error) {
	var out []runtime.Object
	switch l := list.(type) {
	case *bashiblev1alpha1.BashibleList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *bashiblev1alpha1.NodeGroupBundleList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *bashiblev1alpha1.BootstrapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T", list)
	}
	return out, nil
}
