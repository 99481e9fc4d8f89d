package controlplane

import (
	"bytes"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/manifests"
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

// ShippedDenyKubeconfig is where manifests/control-plane/authorization-config.yaml
// expects the kubeconfig of its never-answering webhook on a real control
// plane; the harness puts it in its own directory.
const ShippedDenyKubeconfig = "/etc/kubernetes/node-manager/deny.kubeconfig"

// writeAuthorizationConfig writes kube-apiserver's authorization chain: the
// one node-manager ships (manifests/control-plane), unchanged but for the
// path of its kubeconfig, so that every suite runs under what an operator
// installs.
func (cp *ControlPlane) writeAuthorizationConfig() error {
	config, err := manifests.FS.ReadFile("control-plane/authorization-config.yaml")
	if err != nil {
		return fmt.Errorf("read the shipped authorization configuration: %w", err)
	}
	kubeconfig, err := manifests.FS.ReadFile("control-plane/deny.kubeconfig")
	if err != nil {
		return fmt.Errorf("read the shipped deny webhook kubeconfig: %w", err)
	}
	if !bytes.Contains(config, []byte(ShippedDenyKubeconfig)) {
		return fmt.Errorf("manifests/control-plane/authorization-config.yaml does not name %s", ShippedDenyKubeconfig)
	}
	config = bytes.ReplaceAll(config, []byte(ShippedDenyKubeconfig), []byte(cp.path("deny.kubeconfig")))
	return writeFiles(cp.dir, map[string][]byte{"authorization-config.yaml": config, "deny.kubeconfig": kubeconfig})
}
