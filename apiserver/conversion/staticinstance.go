package conversion

// StaticInstance: hub v1alpha2 (storage), spoke v1alpha1.
//
// Deckhouse publishes both versions with the same schema (v1alpha2 came
// with SSHCredentials' v1alpha2, whose credentials a StaticInstance names),
// and so does node-manager: the conversion changes nothing but the
// apiVersion. spec.credentialsRef.apiVersion is kept as written (only the
// name is read).
//
// Losses: none, either way.

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

var staticInstance = Kind{
	GroupKind: schema.GroupKind{Group: deckhousev1alpha2.GroupName, Kind: "StaticInstance"},
	Hub:       deckhousev1alpha2.SchemeGroupVersion.Version,
	Spokes: map[string]Spoke{
		deckhousev1alpha1.SchemeGroupVersion.Version: {
			Up:      func(map[string]any) error { return nil },
			Down:    func(map[string]any) error { return nil },
			Restore: func(hub, saved map[string]any) error { return nil },
		},
	},
}
