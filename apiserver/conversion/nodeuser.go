package conversion

// NodeUser: hub v1 (storage), spoke v1alpha1.
//
// Deckhouse publishes both versions with the same spec; v1 adds the
// status (status.errors, per node). node-manager's v1alpha1 is v1's Go
// types, status included, so both are validated alike and the conversion
// changes nothing but the apiVersion.
//
// Losses: none, either way.

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

var nodeUser = Kind{
	GroupKind: schema.GroupKind{Group: deckhousev1.GroupName, Kind: "NodeUser"},
	Hub:       deckhousev1.SchemeGroupVersion.Version,
	Spokes: map[string]Spoke{
		deckhousev1alpha1.SchemeGroupVersion.Version: {
			Up:      func(map[string]any) error { return nil },
			Down:    func(map[string]any) error { return nil },
			Restore: func(hub, saved map[string]any) error { return nil },
		},
	},
}
