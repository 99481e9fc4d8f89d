package apiserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
	"github.com/node-manager/node-manager/templates"
)

// controllerClient is a client with node-manager-controller's own identity
// (its ServiceAccount's user and groups), so its RBAC and admission
// policies apply exactly.
func controllerClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cert, key, err := f.CP.IssueClientCert(stack.ControllerUser, "system:serviceaccounts", "system:serviceaccounts:"+deckhousev1.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	admin := f.CP.AdminConfig()
	cfg := &rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: f.CP.CACertPEM(), CertData: cert, KeyData: key}}
	return kubernetes.NewForConfigOrDie(cfg)
}

// publishedSecret finds group's published bundle wherever the server
// publishes it (found by its label, so the test asks the same of any
// version of the server).
func publishedSecret(t *testing.T, group string) *corev1.Secret {
	t.Helper()
	var found *corev1.Secret
	framework.Poll(t, "the published Secret of group "+group, func(ctx context.Context) (bool, error) {
		list, err := f.Kube.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.PublishedBundleAppLabel + "=" + deckhousev1.BashibleAPIServerName})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			if list.Items[i].Name == deckhousev1.PublishedBundleSecretPrefix+group {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// forgedBundle is what a forger who knows the format writes: a bundle whose
// step plants a marker, under a correctly recomputed checksum.
func forgedBundle(t *testing.T, group string) (data map[string][]byte, sum string) {
	t.Helper()
	bashible := "#!/usr/bin/env bash\n"
	steps := map[string]string{"000_forged.sh": "touch /tmp/forged-by-an-attacker\n"}
	sum = templates.Checksum(bashible, steps)
	raw, err := json.Marshal(&bundles.Published{Group: group, NodeType: "Static", Checksum: sum, Bashible: bundles.NewScript(bashible), Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"bundle.json.gz": buf.Bytes()}, sum
}

// refused asserts that write is refused with 403. It first tries it as a
// dry run until refused (a policy just installed takes about a second to be
// enforced), so that an allowed attempt changes nothing while the policy is
// not in force yet, then for real.
func refused(t *testing.T, what string, write func(ctx context.Context, dryRun []string) error) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(framework.Context(t), 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsForbidden(write(ctx, []string{metav1.DryRunAll})), nil
	})
	if err := write(framework.Context(t), nil); !apierrors.IsForbidden(err) {
		t.Errorf("%s: want 403 Forbidden, got %v", what, err)
	}
}

func TestControllerIdentityCannotWriteAPublishedBundle(t *testing.T) {
	controller := controllerClient(t)
	published := publishedSecret(t, "worker")
	forged, _ := forgedBundle(t, "worker")
	ns := published.Namespace

	refused(t, "the controller creates a forged bundle where bundles are published", func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.PublishedBundleSecretPrefix + "forged", Namespace: ns, Labels: published.Labels},
			Data:       forged,
		}, metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	refused(t, "the controller overwrites a published bundle with a forged one", func(ctx context.Context, dryRun []string) error {
		s := published.DeepCopy()
		s.Data = forged
		_, err := controller.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{DryRun: dryRun})
		return err
	})
	refused(t, "the controller deletes a published bundle", func(ctx context.Context, dryRun []string) error {
		return controller.CoreV1().Secrets(ns).Delete(ctx, published.Name, metav1.DeleteOptions{DryRun: dryRun})
	})
	// Nor may it plant one in its own namespace, where bundles used to be.
	refused(t, "the controller creates a bundle Secret in "+deckhousev1.Namespace, func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(deckhousev1.Namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.PublishedBundleSecretPrefix + "worker-copy", Namespace: deckhousev1.Namespace, Labels: published.Labels},
			Data:       forged,
		}, metav1.CreateOptions{DryRun: dryRun})
		return err
	})
}

func TestTamperedBundleIsRestoredWhileTheGroupFailsToRender(t *testing.T) {
	ctx := framework.Context(t)
	if _, err := f.CreateGroup(ctx, framework.NewGroup("tampered")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteGroup(t, "tampered") })
	good := f.WaitChecksum(t, "tampered", func(s string) bool { return s != "" })

	f.TestConfiguration(t, "tampered-broken.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"tampered"}, Bundles: []string{"*"}, Weight: 93, Content: `{{ fail "not ready yet" }}`,
	})
	framework.Poll(t, "group tampered reported as failing to render", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "tampered", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range ng.Status.Conditions {
			if c.Type == bundles.ConditionRendered && c.Status == metav1.ConditionFalse {
				return true, nil
			}
		}
		return false, nil
	})

	// An administrator (who can) overwrites the published bundle with a
	// forged one whose checksum is right.
	published := publishedSecret(t, "tampered")
	forged, forgedSum := forgedBundle(t, "tampered")
	published.Data = forged
	published.Annotations[bashiblev1alpha1.ChecksumAnnotation] = forgedSum
	written, err := f.Kube.CoreV1().Secrets(published.Namespace).Update(ctx, published, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restored := waitServedAfter(t, "tampered", written.ResourceVersion, good)
	assertStaysGood(t, "tampered", good, forgedSum)

	// Deleted: re-created from the last good bundle too.
	if err := f.Kube.CoreV1().Secrets(published.Namespace).Delete(ctx, published.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServedAfter(t, "tampered", restored, good)
	assertStaysGood(t, "tampered", good, forgedSum)
}

// deleteGroup deletes a group and waits until its bundle is gone, so the
// next test starts from a settled server.
func deleteGroup(t *testing.T, group string) {
	t.Helper()
	if err := f.NM.DeckhouseV1().NodeGroups().Delete(context.Background(), group, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
		return
	}
	framework.Poll(t, "the bundle of deleted group "+group+" gone", func(ctx context.Context) (bool, error) {
		_, err := f.NM.BashibleV1alpha1().NodeGroupBundles().Get(ctx, group, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// waitServedAfter waits until group is served from a Secret written after
// resourceVersion rv (a served object's resourceVersion is its Secret's)
// with checksum want, and returns the served resourceVersion.
func waitServedAfter(t *testing.T, group, rv, want string) string {
	t.Helper()
	after, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var last, servedRV string
	framework.Poll(t, "group "+group+" served from a rewritten Secret with checksum "+want, func(ctx context.Context) (bool, error) {
		b, err := f.NM.BashibleV1alpha1().NodeGroupBundles().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		served, _ := strconv.ParseUint(b.ResourceVersion, 10, 64)
		last, servedRV = fmt.Sprintf("resourceVersion %s, checksum %s", b.ResourceVersion, checksum0(b)), b.ResourceVersion
		return served > after && checksum0(b) == want, nil
	})
	t.Logf("group %s: %s", group, last)
	return servedRV
}

// assertStaysGood watches group's served bundle for a few seconds: it must
// keep the good checksum and never serve the forged step.
func assertStaysGood(t *testing.T, group, good, forged string) {
	t.Helper()
	for range 10 {
		b := f.Bundle(t, group)
		if sum := checksum0(b); sum != good {
			t.Fatalf("group %s serves %s after the restore (good %s, forged %s)", group, sum, good, forged)
		}
		if _, ok := b.Data["000_forged.sh"]; ok {
			t.Fatalf("group %s serves the forged step", group)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func TestControllerIdentityCannotWriteOtherSecrets(t *testing.T) {
	// A Secret of node-manager's namespace that is not the controller's
	// (bashible-api-server-tls is: it issues it, TestCertificatesManageThemselves).
	const foreignSecret = "someone-elses-tls"
	ctx := framework.Context(t)
	controller := controllerClient(t)
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Data: map[string][]byte{deckhousev1.ClusterConfigurationKey: []byte("kind: ClusterConfiguration\n")}}
	}

	refused(t, "the controller creates kube-system/"+deckhousev1.ClusterConfigurationSecret, func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, secret(metav1.NamespaceSystem, deckhousev1.ClusterConfigurationSecret), metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	refused(t, "the controller creates "+deckhousev1.Namespace+"/"+foreignSecret, func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(deckhousev1.Namespace).Create(ctx, secret(deckhousev1.Namespace, foreignSecret), metav1.CreateOptions{DryRun: dryRun})
		return err
	})

	refused(t, "the controller creates "+deckhousev1.Namespace+"/"+deckhousev1.BashibleAPIServerTLSSecret+" as another type than kubernetes.io/tls", func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(deckhousev1.Namespace).Create(ctx, secret(deckhousev1.Namespace, deckhousev1.BashibleAPIServerTLSSecret), metav1.CreateOptions{DryRun: dryRun})
		return err
	})

	// Both exist in a real cluster; the administrator creates them here.
	for _, s := range []*corev1.Secret{secret(metav1.NamespaceSystem, deckhousev1.ClusterConfigurationSecret), secret(deckhousev1.Namespace, foreignSecret)} {
		if _, err := f.Kube.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = f.Kube.CoreV1().Secrets(s.Namespace).Delete(context.Background(), s.Name, metav1.DeleteOptions{})
		})
	}
	refused(t, "the controller deletes kube-system/"+deckhousev1.ClusterConfigurationSecret, func(ctx context.Context, dryRun []string) error {
		return controller.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, deckhousev1.ClusterConfigurationSecret, metav1.DeleteOptions{DryRun: dryRun})
	})
	refused(t, "the controller overwrites "+deckhousev1.Namespace+"/"+foreignSecret, func(ctx context.Context, dryRun []string) error {
		s, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, foreignSecret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Data = map[string][]byte{"tls.key": []byte("attacker's key")}
		_, err = controller.CoreV1().Secrets(deckhousev1.Namespace).Update(ctx, s, metav1.UpdateOptions{DryRun: dryRun})
		return err
	})
	refused(t, "the controller deletes "+deckhousev1.Namespace+"/"+foreignSecret, func(ctx context.Context, dryRun []string) error {
		return controller.CoreV1().Secrets(deckhousev1.Namespace).Delete(ctx, foreignSecret, metav1.DeleteOptions{DryRun: dryRun})
	})
	token := func(name, typ, groups string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem}, Type: corev1.SecretType(typ),
			Data: map[string][]byte{"token-id": []byte(name[len("bootstrap-token-"):]), "token-secret": []byte("0123456789abcdef"),
				"usage-bootstrap-authentication": []byte("true"), "auth-extra-groups": []byte(groups)}}
	}
	refused(t, "the controller issues a bootstrap token with kubeadm's group", func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx,
			token("bootstrap-token-abcdef", string(corev1.SecretTypeBootstrapToken), "system:bootstrappers:d8-node-manager,system:bootstrappers:kubeadm:default-node-token"),
			metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	refused(t, "the controller creates a manual-bootstrap Secret that would mint bashible-apiserver's token", func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(deckhousev1.Namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.ManualBootstrapSecretPrefix + "mint", Namespace: deckhousev1.Namespace,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: deckhousev1.BashibleAPIServerName}},
			Type: corev1.SecretTypeServiceAccountToken,
		}, metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	refused(t, "the controller creates an Opaque Secret named like a bootstrap token", func(ctx context.Context, dryRun []string) error {
		_, err := controller.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx,
			token("bootstrap-token-abcdef", string(corev1.SecretTypeOpaque), deckhousev1.BootstrappersGroup), metav1.CreateOptions{DryRun: dryRun})
		return err
	})

	// What it owns it may still write (dry runs: nothing is left behind).
	dry := []string{metav1.DryRunAll}
	if _, err := controller.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx,
		token("bootstrap-token-abcdef", string(corev1.SecretTypeBootstrapToken), deckhousev1.BootstrappersGroup), metav1.CreateOptions{DryRun: dry}); err != nil {
		t.Errorf("the controller must still issue node-manager's bootstrap tokens: %v", err)
	}
	for _, name := range []string{deckhousev1.ConfigurationChecksumsSecret, deckhousev1.ManualBootstrapSecretPrefix + "worker"} {
		if _, err := controller.CoreV1().Secrets(deckhousev1.Namespace).Create(ctx,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: deckhousev1.Namespace}}, metav1.CreateOptions{DryRun: dry}); err != nil &&
			// Already there (a controller of another test wrote it): the
			// admission policies passed the create before storage found it.
			!apierrors.IsAlreadyExists(err) {
			t.Errorf("the controller must still write %s/%s: %v", deckhousev1.Namespace, name, err)
		}
	}
}
