package controllers

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/bootstraptokens"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestACloudEphemeralGroupGetsBootstrapDataNotAManualSecret: the real
// controller, as its ServiceAccount under the Secrets policy, writes a
// CloudEphemeral group's bootstrap data in Cluster API's form (the
// cloud-config that runs the manual-bootstrap script, and its format), and
// no manual-bootstrap Secret; when the group deletes, so does its Secret.
func TestACloudEphemeralGroupGetsBootstrapDataNotAManualSecret(t *testing.T) {
	t.Parallel()
	const group = "bootstrap-data"
	f.TestGroup(t, framework.NewGroup(group, framework.OfType(deckhousev1.NodeTypeCloudEphemeral)))
	secrets := f.Kube.CoreV1().Secrets(deckhousev1.Namespace)
	framework.Poll(t, "Secret "+bootstraptokens.BootstrapDataSecretName(group)+" in Cluster API's form", func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, bootstraptokens.BootstrapDataSecretName(group), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return string(s.Data[infrav1alpha1.BootstrapDataFormatKey]) == deckhousev1.ManualBootstrapCloudConfigKey &&
			strings.HasPrefix(string(s.Data[infrav1alpha1.ClusterSecretValueKey]), "#cloud-config\n") &&
			s.Annotations[deckhousev1.TokenIDAnnotation] != "", nil
	})
	if _, err := secrets.Get(framework.Context(t), bootstraptokens.SecretName(group), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("CloudEphemeral group %s: want no manual-bootstrap Secret, got %v", group, err)
	}
	if err := f.NM.DeckhouseV1().NodeGroups().Delete(framework.Context(t), group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "Secret "+bootstraptokens.BootstrapDataSecretName(group)+" deleted with its group", func(ctx context.Context) (bool, error) {
		_, err := secrets.Get(ctx, bootstraptokens.BootstrapDataSecretName(group), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
