package apiserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// documentedContextCommand is Deckhouse's NodeGroupConfiguration reference
// (modules/040-node-manager/crds/nodegroupconfiguration.yaml, spec.content):
// "The list of parameters available for use in templates can be retrieved
// from the bashible-apiserver-context Secret as follows".
const documentedContextCommand = `kubectl -n d8-cloud-instance-manager get secrets bashible-apiserver-context -o jsonpath='{.data.input\.yaml}'| base64 -d`

// userClient is a user's client config (a client certificate of the test
// CA) and a kubeconfig file with it, for kubectl.
func userClient(t *testing.T, user string, groups ...string) (*rest.Config, string) {
	t.Helper()
	cert, key, err := f.CP.IssueClientCert(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := f.CP.WriteClientKubeconfig(kubeconfig, user, cert, key); err != nil {
		t.Fatal(err)
	}
	admin := f.CP.AdminConfig()
	return &rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: f.CP.CACertPEM(), CertData: cert, KeyData: key}}, kubeconfig
}

// runDocumented runs Deckhouse's documented command as the user of
// kubeconfig, with the repository's kubectl.
func runDocumented(ctx context.Context, kubeconfig string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", documentedContextCommand)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Join(f.Root, "bin")+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAnAuthorReadsTheContextSecretAndUsesAFieldOfIt is a NodeGroupConfiguration
// author's documented workflow: read the Secret with the documented
// command, find a field of a group, use it in a step, and see the group's
// bundle carry its value. The author is someone who reads bundles (the
// ClusterRole d8:node-manager:bashible-apiserver:reader) and was bound the
// context's reader Role, as the docs say to bind it.
func TestAnAuthorReadsTheContextSecretAndUsesAFieldOfIt(t *testing.T) {
	ctx := framework.Context(t)
	f.TestGroup(t, framework.NewGroup("context-reader", func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](87)}
	}))
	const author = "ngc-author"
	authorCfg, kubeconfig := userClient(t, author)
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: author}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-ngc-author-reads-bundles"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "d8:node-manager:bashible-apiserver:reader"}}
	if _, err := f.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ngc-authors", Namespace: deckhousev1.Namespace}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "d8:node-manager:bashible-apiserver-context:reader"}}
	if _, err := f.Kube.RbacV1().RoleBindings(deckhousev1.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.RbacV1().RoleBindings(deckhousev1.Namespace).Delete(context.Background(), rb.Name, metav1.DeleteOptions{})
	})

	// 1. Read the Secret as documented, until it shows the new group.
	type element struct {
		Name    string `json:"name"`
		Kubelet struct {
			MaxPods *int32 `json:"maxPods"`
		} `json:"kubelet"`
	}
	var found *element
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := runDocumented(ctx, kubeconfig)
		last = out
		if err != nil {
			return false, nil
		}
		var doc struct {
			NodeGroups []element `json:"nodeGroups"`
		}
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
			return false, nil
		}
		for i := range doc.NodeGroups {
			if doc.NodeGroups[i].Name == "context-reader" {
				found = &doc.NodeGroups[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the documented command never showed group context-reader: %v; it printed:\n%s", err, last)
	}
	// 2. Find the field: the group's element of nodeGroups is its .nodeGroup.
	if found.Kubelet.MaxPods == nil || *found.Kubelet.MaxPods != 87 {
		t.Fatalf("nodeGroups shows context-reader's kubelet.maxPods as %v, want 87 (the group's spec)", found.Kubelet.MaxPods)
	}
	for _, absent := range []string{"bootstrapTokens", "token-secret"} {
		if strings.Contains(last, absent) {
			t.Errorf("input.yaml shows %q", absent)
		}
	}

	// 3. Use it in a step of that group.
	ngc := f.TestConfiguration(t, "context-author.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"context-reader"}, Bundles: []string{"*"}, Weight: 95,
		Content: "echo \"maxPods of {{ .nodeGroup.name }}: {{ .nodeGroup.kubelet.maxPods }}\"\n",
	})
	waitConfigProcessed(t, ngc.Name, ngc.Generation)

	// 4. The author sees the group's bundle render the value.
	want := "maxPods of context-reader: 87"
	framework.Poll(t, "context-reader's bundle renders "+want, func(ctx context.Context) (bool, error) {
		b, err := framework.BashibleClient(authorCfg).NodeGroupBundles().Get(ctx, "context-reader", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for name, step := range b.Data {
			if strings.HasSuffix(name, "_context-author.sh") && strings.Contains(step, want) {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestOnlyThoseGrantedReadTheContextSecret: nodes and bootstrap tokens read
// bundles, each only its own group's, and the Secret holds every group's:
// they, and anyone else not granted, get 403. bashible-apiserver itself
// may create no other Secret in d8-cloud-instance-manager.
func TestOnlyThoseGrantedReadTheContextSecret(t *testing.T) {
	ctx := framework.Context(t)
	framework.Poll(t, "the context Secret is written", func(ctx context.Context) (bool, error) {
		_, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ContextSecret, metav1.GetOptions{})
		return err == nil, nil
	})
	f.TestNode(t, framework.NewNode("node-ctx", "worker"))
	f.TestInstance(t, framework.NewInstance("node-ctx", "worker"))
	nodeCfg, err := f.CP.NodeConfig("node-ctx")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := f.CP.CreateBootstrapToken(ctx, "worker", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nobody, nobodyKubeconfig := userClient(t, "nobody")
	for who, cfg := range map[string]*rest.Config{"node node-ctx": nodeCfg, "a bootstrap token": f.CP.BootstrapTokenConfig(tok), "user nobody": nobody} {
		_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ContextSecret, metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s reading the context Secret: want 403, got %v", who, err)
		}
	}
	if out, err := runDocumented(ctx, nobodyKubeconfig); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("the documented command as user nobody: want Forbidden, got %v: %s", err, out)
	}

	cert, key, err := f.CP.IssueClientCert(stack.ServiceAccountUser, "system:serviceaccounts", "system:serviceaccounts:"+deckhousev1.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	server := kubernetes.NewForConfigOrDie(&rest.Config{Host: f.CP.AdminConfig().Host, TLSClientConfig: rest.TLSClientConfig{CAData: f.CP.CACertPEM(), CertData: cert, KeyData: key}})
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-the-context", Namespace: deckhousev1.Namespace}, Type: corev1.SecretTypeOpaque}
	_, err = server.CoreV1().Secrets(deckhousev1.Namespace).Create(ctx, other, metav1.CreateOptions{})
	if err == nil {
		_ = f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may create in d8-cloud-instance-manager only the Opaque Secret bashible-apiserver-context") {
		t.Errorf("bashible-apiserver creating another Secret in %s: want 403 from its policy, got %v", deckhousev1.Namespace, err)
	}
}
