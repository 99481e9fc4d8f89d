package conversion

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kinds is every deckhouse.io kind served at more than one version, by
// kind. One line per kind, each kind's conversions in its own file.
var Kinds = map[schema.GroupKind]Kind{
	sshCredentials.GroupKind: sshCredentials,
	staticInstance.GroupKind: staticInstance,
	nodeUser.GroupKind:       nodeUser,
	instance.GroupKind:       instance,
	nodeGroup.GroupKind:      nodeGroup,
}

// For returns the conversions of gk.
func For(gk schema.GroupKind) (Kind, error) {
	k, ok := Kinds[gk]
	if !ok {
		return Kind{}, fmt.Errorf("no conversions for %s: it is served at one version", gk)
	}
	return k, nil
}

func runtimeDeepCopy(m map[string]any) map[string]any {
	return runtime.DeepCopyJSON(m)
}
