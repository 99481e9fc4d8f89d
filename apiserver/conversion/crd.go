package conversion

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// ServicePort is the port of Service bashible-api-conversion
// (manifests/bashible-apiserver/service.yaml) the CRDs' conversion webhook
// names; the Service maps it to the secure port.
const ServicePort = 443

// CRDConversion is the spec.conversion of every deckhouse.io CRD served at
// more than one version (hack/cmd/crdconversion writes it into
// manifests/crds): this webhook, on bashible-apiserver's conversion Service
// (which routes to replicas not ready yet as well), with
// ConversionReview v1. The caBundle is left to node-manager-controller's
// certificate controller (deckhousev1.InjectCABundleLabel).
func CRDConversion() *apiextensionsv1.CustomResourceConversion {
	path := bashiblev1alpha1.ConversionWebhookPath
	port := int32(ServicePort)
	return &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{
				Namespace: deckhousev1.Namespace, Name: bashiblev1alpha1.ConversionServiceName, Path: &path, Port: &port}},
			ConversionReviewVersions: []string{"v1"},
		},
	}
}
