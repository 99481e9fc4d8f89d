package controlplane

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
)

// writeAdmissionConfig writes kube-apiserver's admission configuration:
// it calls admission webhooks with a client certificate of the cluster CA
// (CN bashiblev1alpha1.PreviewWebhookCallerUser), as a production
// kube-apiserver does when its admission kubeconfig gives it one, so a
// webhook served behind delegated authentication (bashible-apiserver's
// preview) can tell kube-apiserver from anyone else. The kubeconfig's user
// "*" applies to every webhook.
func (cp *ControlPlane) writeAdmissionConfig() error {
	client, err := cp.ca.clientCert(bashiblev1alpha1.PreviewWebhookCallerUser)
	if err != nil {
		return err
	}
	kubeconfig := clientcmdapi.Config{AuthInfos: map[string]*clientcmdapi.AuthInfo{"*": {
		ClientCertificateData: client.CertPEM,
		ClientKeyData:         client.KeyPEM,
	}}}
	if err := clientcmd.WriteToFile(kubeconfig, cp.path("admission-webhooks.kubeconfig")); err != nil {
		return fmt.Errorf("write the admission webhooks' kubeconfig: %w", err)
	}
	config := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: %q
  - name: MutatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: %q
`, cp.path("admission-webhooks.kubeconfig"), cp.path("admission-webhooks.kubeconfig"))
	if err := os.WriteFile(cp.path("admission-config.yaml"), []byte(config), 0o600); err != nil {
		return fmt.Errorf("write the admission configuration: %w", err)
	}
	return nil
}
