package foundation

import (
	"context"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

func whoAmI(t *testing.T, cfg *rest.Config) (string, []string, error) {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(framework.Context(t), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	return review.Status.UserInfo.Username, review.Status.UserInfo.Groups, nil
}

func TestNodeIdentity(t *testing.T) {
	cfg, err := f.CP.NodeConfig("node-a")
	if err != nil {
		t.Fatal(err)
	}
	user, groups, err := whoAmI(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if user != "system:node:node-a" || !slices.Contains(groups, "system:nodes") {
		t.Fatalf("node credentials authenticate as %q %v", user, groups)
	}
	// The Node authorizer and NodeRestriction admission apply, as in a real
	// cluster: a node may create its own Node object and no other.
	node := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes()
	if _, err := node.Create(framework.Context(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node-a creating its own Node: %v", err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), "node-a", metav1.DeleteOptions{}) })
	_, err = node.Create(framework.Context(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("node-a creating Node node-b: want Forbidden, got %v", err)
	}
}

func TestBootstrapTokenIdentity(t *testing.T) {
	tok, err := f.CP.CreateBootstrapToken(framework.Context(t), "worker", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	user, groups, err := whoAmI(t, f.CP.BootstrapTokenConfig(tok))
	if err != nil {
		t.Fatal(err)
	}
	// The token's node group is authenticated too: bashible-apiserver and
	// node-manager's CSR approver read it from the request.
	if user != "system:bootstrap:"+tok.ID || !slices.Contains(groups, "system:bootstrappers") || !slices.Contains(groups, deckhousev1.BootstrappersGroup) ||
		!slices.Contains(groups, deckhousev1.BootstrappersGroup+":worker") {
		t.Fatalf("bootstrap token authenticates as %q %v", user, groups)
	}
	secret, err := f.Kube.CoreV1().Secrets("kube-system").Get(framework.Context(t), "bootstrap-token-"+tok.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Labels[deckhousev1.TokenNodeGroupLabel] != "worker" {
		t.Errorf("token Secret labels = %v", secret.Labels)
	}

	wrong := tok
	wrong.Secret = "0000000000000000"
	if _, _, err := whoAmI(t, f.CP.BootstrapTokenConfig(wrong)); !apierrors.IsUnauthorized(err) {
		t.Fatalf("a wrong token secret: want Unauthorized, got %v", err)
	}
}

func TestAnonymousIsRefused(t *testing.T) {
	_, err := kubernetes.NewForConfigOrDie(f.CP.AnonymousConfig()).CoreV1().Secrets("kube-system").List(framework.Context(t), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("anonymous listing secrets: want Forbidden, got %v", err)
	}
}

// TestControllerManagerControllers proves the kube-controller-manager
// controllers node-manager relies on are running: token cleaner, bootstrap
// signer, disruption (PDB status), garbage collector and namespace.
func TestControllerManagerControllers(t *testing.T) {
	ctx := framework.Context(t)
	t.Run("token cleaner removes an expired token", func(t *testing.T) {
		tok, err := f.CP.CreateBootstrapToken(ctx, "worker", -time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		framework.Poll(t, "the expired token Secret is deleted", func(ctx context.Context) (bool, error) {
			_, err := f.Kube.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+tok.ID, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
	t.Run("bootstrap signer signs cluster-info", func(t *testing.T) {
		_, err := f.Kube.CoreV1().ConfigMaps("kube-public").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-info"},
			Data:       map[string]string{"kubeconfig": "apiVersion: v1\nkind: Config\nclusters: []\n"},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		tok, err := f.CP.CreateBootstrapToken(ctx, "worker", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		framework.Poll(t, "cluster-info gets the token's signature", func(ctx context.Context) (bool, error) {
			cm, err := f.Kube.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
			return err == nil && cm.Data["jws-kubeconfig-"+tok.ID] != "", err
		})
	})
	t.Run("disruption controller computes PDB status, namespace and garbage collectors clean up", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
		ns, err := f.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "app"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			},
		}
		if _, err := f.Kube.PolicyV1().PodDisruptionBudgets(ns.Name).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Poll(t, "the PDB's status is computed", func(ctx context.Context) (bool, error) {
			got, err := f.Kube.PolicyV1().PodDisruptionBudgets(ns.Name).Get(ctx, "app", metav1.GetOptions{})
			return err == nil && got.Status.ObservedGeneration == got.Generation && len(got.Status.Conditions) > 0, err
		})

		owner, err := f.Kube.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}}}}
		if _, err := f.Kube.CoreV1().ConfigMaps(ns.Name).Create(ctx, dependent, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := f.Kube.CoreV1().ConfigMaps(ns.Name).Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Poll(t, "the garbage collector deletes the dependent", func(ctx context.Context) (bool, error) {
			_, err := f.Kube.CoreV1().ConfigMaps(ns.Name).Get(ctx, "dependent", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})

		if err := f.Kube.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Poll(t, "the namespace controller finishes deleting the namespace", func(ctx context.Context) (bool, error) {
			_, err := f.Kube.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
}
