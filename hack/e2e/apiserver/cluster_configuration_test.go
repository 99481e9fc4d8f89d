package apiserver

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// setClusterConfiguration writes kube-system/d8-cluster-configuration for
// the rest of the test and removes it afterwards, as a cluster without one
// (which every other test of the suite expects).
func setClusterConfiguration(t *testing.T, yaml string) {
	t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.ClusterConfigurationSecret, Namespace: metav1.NamespaceSystem},
		Data:       map[string][]byte{deckhousev1.ClusterConfigurationKey: []byte(yaml)},
	}
	secrets := f.Kube.CoreV1().Secrets(metav1.NamespaceSystem)
	_, err := secrets.Create(framework.Context(t), secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(framework.Context(t), secret, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := secrets.Delete(context.Background(), deckhousev1.ClusterConfigurationSecret, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("remove the cluster configuration: %v", err)
		}
	})
}
