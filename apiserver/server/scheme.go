// Package server is bashible-apiserver: a k8s.io/apiserver GenericAPIServer
// with no storage of its own, built as options → config → completed config
// → server, that serves bashible.deckhouse.io/v1alpha1 from apiserver/bundles
// through the REST storages in registry/.
package server

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
)

var (
	// Scheme knows the served types.
	Scheme = runtime.NewScheme()
	// Codecs encode and decode them.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	utilruntime.Must(bashiblev1alpha1.AddToScheme(Scheme))
	// The objects are computed and never stored, so the internal version is
	// the external one: the same Go types, and conversion is only a kind change.
	Scheme.AddKnownTypes(schema.GroupVersion{Group: bashiblev1alpha1.GroupName, Version: runtime.APIVersionInternal}, bashiblev1alpha1.KnownTypes()...)
	utilruntime.Must(Scheme.SetVersionPriority(bashiblev1alpha1.SchemeGroupVersion))

	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}
