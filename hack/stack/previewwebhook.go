package stack

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// RegisterPreviewWebhook installs the preview at apply time for s, from
// the real manifests: the RBAC of manifests/bashible-apiserver/preview.yaml
// and the ValidatingWebhookConfiguration of preview-webhook.yaml, pointed at
// s's port (through the ExternalName Service Register writes) and trusting
// the cluster CA. From then on kube-apiserver sends NodeGroup and
// NodeGroupConfiguration writes to s; `make run` registers it, and e2e
// suites that want it call it after StartRegistered.
func (s *APIServer) RegisterPreviewWebhook(ctx context.Context) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "manifests", deckhousev1.BashibleAPIServerName)
	objs, err := controlplane.ReadManifests(filepath.Join(dir, "preview.yaml"), filepath.Join(dir, "preview-webhook.yaml"))
	if err != nil {
		return err
	}
	found := false
	for _, obj := range objs {
		if obj.GetKind() != "ValidatingWebhookConfiguration" || obj.GetName() != bashiblev1alpha1.PreviewWebhookConfigurationName {
			continue
		}
		found = true
		hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for _, h := range hooks {
			hook := h.(map[string]any)
			if err := unstructured.SetNestedField(hook, int64(s.Port), "clientConfig", "service", "port"); err != nil {
				return err
			}
			if err := unstructured.SetNestedField(hook, base64.StdEncoding.EncodeToString(s.cp.CACertPEM()), "clientConfig", "caBundle"); err != nil {
				return fmt.Errorf("set the caBundle of %s: %w", bashiblev1alpha1.PreviewWebhookConfigurationName, err)
			}
		}
		if err := unstructured.SetNestedSlice(obj.Object, hooks, "webhooks"); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("%s: no ValidatingWebhookConfiguration %s", dir, bashiblev1alpha1.PreviewWebhookConfigurationName)
	}
	applier, err := s.cp.NewApplier()
	if err != nil {
		return err
	}
	return applier.Apply(ctx, objs...)
}
