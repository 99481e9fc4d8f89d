package crdmigration

import (
	"errors"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

var errNotCRD = errors.New("not a CustomResourceDefinition")

// Plan says what a CRD needs: its storage version, and the versions its
// status.storedVersions lists besides (none: nothing to do). Only
// deckhouse.io CRDs are node-manager's to migrate.
func Plan(crd *apiextensionsv1.CustomResourceDefinition) (storage string, stale []string) {
	if crd.Spec.Group != deckhousev1.GroupName {
		return "", nil
	}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
	}
	if storage == "" {
		return "", nil
	}
	for _, v := range crd.Status.StoredVersions {
		if v != storage {
			stale = append(stale, v)
		}
	}
	return storage, stale
}
