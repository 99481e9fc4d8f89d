// Command crdconversion gives every deckhouse.io CRD that serves more than
// one version its conversion webhook, which controller-gen cannot emit:
// spec.conversion with strategy Webhook, ConversionReview v1, and the
// clientConfig of bashible-apiserver's conversion Service
// (bashible-api-conversion in d8-cloud-instance-manager, port 443, path
// /conversion/deckhouse.io),
// plus the label node-manager.deckhouse.io/inject-ca-bundle, by which
// node-manager-controller's certificate controller writes the caBundle
// (left out here, so that a server-side apply keeps what it wrote).
// hack/codegen.sh runs it on manifests/crds after controller-gen, so
// `make generate` writes it and `make verify-generated` checks it.
//
// It fails when a CRD serves several versions but apiserver/conversion has
// no conversions for its kind: the webhook would refuse every conversion.
//
// usage: crdconversion DIR
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/conversion"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdconversion DIR (the CRD manifests controller-gen wrote)")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "crdconversion: %v\n", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, deckhousev1.GroupName+"_*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%s holds no %s_*.yaml CRD manifests", dir, deckhousev1.GroupName)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		out, err := Process(data, conversion.For)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if !bytes.Equal(out, data) {
			if err := os.WriteFile(f, out, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// Process returns the CRD manifest data (as controller-gen writes it) with
// the conversion webhook when it serves several versions, unchanged
// otherwise. kinds says whether conversions exist for a kind.
func Process(data []byte, kinds func(schema.GroupKind) (conversion.Kind, error)) ([]byte, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("not a CustomResourceDefinition: %w", err)
	}
	if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != deckhousev1.GroupName {
		return nil, fmt.Errorf("%s %s is not a CRD of %s", crd.Kind, crd.Name, deckhousev1.GroupName)
	}
	if len(crd.Spec.Versions) < 2 {
		return data, nil
	}
	gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
	k, err := kinds(gk)
	if err != nil {
		return nil, fmt.Errorf("CRD %s serves %d versions: %w (add them to apiserver/conversion)", crd.Name, len(crd.Spec.Versions), err)
	}
	for _, v := range crd.Spec.Versions {
		if _, spoke := k.Spokes[v.Name]; v.Name != k.Hub && !spoke {
			return nil, fmt.Errorf("CRD %s serves %s, which apiserver/conversion does not convert (hub %s)", crd.Name, v.Name, k.Hub)
		}
		if v.Storage && v.Name != k.Hub {
			return nil, fmt.Errorf("CRD %s stores %s but apiserver/conversion's hub of %s is %s: they must be the same", crd.Name, v.Name, gk, k.Hub)
		}
	}
	crd.Spec.Conversion = conversion.CRDConversion()
	if crd.Labels == nil {
		crd.Labels = map[string]string{}
	}
	crd.Labels[deckhousev1.InjectCABundleLabel] = "true"
	out, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	// As controller-gen writes it: a document start, no status.
	if i := bytes.Index(out, []byte("\nstatus:\n")); i >= 0 {
		out = out[:i+1]
	}
	return append([]byte("---\n"), out...), nil
}
