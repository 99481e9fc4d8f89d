package conversion

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sync"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/manifests"
)

// Why the hub is validated here: kube-apiserver validates a custom
// resource against the schema of the version it is written at, and then
// converts it to the storage version unchecked. What only the hub holds
// comes back from the ConversionDataAnnotation, which whoever writes the
// object can edit; unchecked, it would let a value into storage that the
// hub's schema and CEL rules refuse (a fencing timeout, an update pin, a
// kubelet setting — what reaches a node). So a hub built from the
// annotation is held to the hub's own schema and rules, as kube-apiserver
// would hold a write at the hub, and the annotation is ignored when it
// fails. (Transition rules, which compare with the stored object, cannot
// be evaluated here: a conversion has no old object.)

// hubSchema validates objects against one version of a CRD.
type hubSchema struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *schemacel.Validator
}

var (
	schemasOnce sync.Once
	schemasMu   sync.RWMutex // guards schemas after loading (tests add to it)
	schemas     map[schema.GroupVersionKind]*hubSchema
	schemasErr  error
)

// loadSchemas reads every version of the deckhouse.io CRDs node-manager
// ships (manifests/crds, embedded).
func loadSchemas() (map[schema.GroupVersionKind]*hubSchema, error) {
	schemasOnce.Do(func() {
		schemas = map[schema.GroupVersionKind]*hubSchema{}
		files, err := fs.Glob(manifests.FS, "crds/deckhouse.io_*.yaml")
		if err != nil {
			schemasErr = err
			return
		}
		for _, file := range files {
			data, err := manifests.FS.ReadFile(file)
			if err != nil {
				schemasErr = err
				return
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(data, &crd); err != nil {
				schemasErr = fmt.Errorf("%s: %w", path.Base(file), err)
				return
			}
			for _, v := range crd.Spec.Versions {
				if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
					continue
				}
				internal := &apiextensionsinternal.JSONSchemaProps{}
				if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
					schemasErr = fmt.Errorf("%s %s: %w", crd.Name, v.Name, err)
					return
				}
				s, err := structuralschema.NewStructural(internal)
				if err != nil {
					schemasErr = fmt.Errorf("%s %s: %w", crd.Name, v.Name, err)
					return
				}
				validator, _, err := apiservervalidation.NewSchemaValidator(internal)
				if err != nil {
					schemasErr = fmt.Errorf("%s %s: %w", crd.Name, v.Name, err)
					return
				}
				gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
				schemas[gvk] = &hubSchema{structural: s, validator: validator, cel: schemacel.NewValidator(s, true, celconfig.PerCallLimit)}
			}
		}
	})
	return schemas, schemasErr
}

// validateAt reports whether obj (a whole object: apiVersion, kind,
// metadata and content) is what kube-apiserver would admit at gvk: no
// unknown field, the OpenAPI schema and the CEL rules. The error names
// paths and rules, never values (SSHCredentials carry secrets).
func validateAt(gvk schema.GroupVersionKind, obj map[string]any) error {
	all, err := loadSchemas()
	if err != nil {
		return fmt.Errorf("reading the CRDs' schemas: %w", err)
	}
	schemasMu.RLock()
	s, ok := all[gvk]
	schemasMu.RUnlock()
	if !ok {
		return fmt.Errorf("no schema for %s", gvk)
	}
	// As kube-apiserver admits a write: nulls of fields that cannot be
	// null dropped, defaults applied, then the checks.
	obj = runtime.DeepCopyJSON(obj)
	defaulting.PruneNonNullableNullsWithoutDefaults(obj, s.structural)
	defaulting.Default(obj, s.structural)
	unknown := pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		return fmt.Errorf("unknown fields %v", unknown)
	}
	errs := apiservervalidation.ValidateCustomResource(nil, obj, s.validator)
	celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	errs = append(errs, celErrs...)
	if len(errs) > 0 {
		paths := make([]string, 0, len(errs))
		for _, e := range errs {
			paths = append(paths, e.Field+": "+string(e.Type))
		}
		return fmt.Errorf("refused by the %s schema at %v", gvk.Version, paths)
	}
	return nil
}
