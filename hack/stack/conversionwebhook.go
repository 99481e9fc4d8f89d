package stack

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// PointConversionWebhooks points the conversion webhook of every CRD that
// names bashible-apiserver's conversion Service (manifests/crds: the
// deckhouse.io kinds served at several versions) at port, through the
// ExternalName Service RegisterConversionAt writes, trusting the cluster CA, as the certificate
// controller and the Service's port mapping do in an installation. It
// returns the CRDs it pointed. Until it runs (or where no
// bashible-apiserver runs) reads at a version other than the storage
// version fail; reads at the storage version never call the webhook.
func PointConversionWebhooks(ctx context.Context, cp *controlplane.ControlPlane, port int) ([]string, error) {
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(crdsResource).List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.InjectCABundleLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("list the CRDs labelled %s: %w", deckhousev1.InjectCABundleLabel, err)
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"conversion": map[string]any{"webhook": map[string]any{"clientConfig": map[string]any{
		"service":  map[string]any{"port": port},
		"caBundle": cp.CACertPEM(),
	}}}}})
	if err != nil {
		return nil, err
	}
	var pointed []string
	for _, crd := range list.Items {
		spec, _ := crd.Object["spec"].(map[string]any)
		conv, _ := spec["conversion"].(map[string]any)
		hook, _ := conv["webhook"].(map[string]any)
		cc, _ := hook["clientConfig"].(map[string]any)
		svc, _ := cc["service"].(map[string]any)
		if conv["strategy"] != "Webhook" || svc["name"] != bashiblev1alpha1.ConversionServiceName || svc["namespace"] != deckhousev1.Namespace {
			continue
		}
		if _, err := dyn.Resource(crdsResource).Patch(ctx, crd.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, fmt.Errorf("point CRD %s's conversion webhook at port %d: %w", crd.GetName(), port, err)
		}
		pointed = append(pointed, crd.GetName())
	}
	return pointed, nil
}
