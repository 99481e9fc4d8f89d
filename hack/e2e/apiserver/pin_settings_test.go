package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// A pin rolls back a group's configuration, not the cluster's: revision 1
// was rendered while the cluster trusted an extra CA, which the
// administrator then removed (revision 2), and a step was added
// (revision 3). A pin to revision 1 would serve the removed CA again, so
// the nodes keep the current bundle and the Pinned condition says why
// (False, ClusterSettingsChanged); a pin to revision 2, under the current
// settings, is served. Only a cluster administrator may allow a pin across
// the change (the annotation naming the revision): a user who may patch
// NodeGroups is refused it by the admission policy.
func TestAPinAcrossARemovedCAServesTheCurrentBundle(t *testing.T) {
	const group = "pin-trust"
	ctx := framework.Context(t)
	ca, caLine := extraCA(t)
	caJSON, err := json.Marshal(ca)
	if err != nil {
		t.Fatal(err)
	}
	setClusterConfiguration(t, "apiVersion: deckhouse.io/v1\nkind: ClusterConfiguration\nextraCACertificates: ["+string(caJSON)+"]\n")
	f.TestGroup(t, framework.NewGroup(group))
	withCA := f.WaitChecksum(t, group, func(s string) bool { return s != "" })
	if !servesText(t, group, caLine) {
		t.Fatal("the bundle rendered with an extra CA does not contain it: the test proves nothing")
	}

	setClusterConfiguration(t, "apiVersion: deckhouse.io/v1\nkind: ClusterConfiguration\nextraCACertificates: []\n")
	withoutCA := f.WaitChecksum(t, group, func(s string) bool { return s != withCA })
	f.TestConfiguration(t, "pin-trust-step.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{group}, Bundles: []string{"*"}, Weight: 70, Content: "echo three\n",
	})
	current := f.WaitChecksum(t, group, func(s string) bool { return s != withoutCA })

	f.Kubectl(t, "patch", "nodegroup", group, "--type=merge", "-p", `{"spec":{"update":{"pinnedRevision":1}}}`)
	cond := waitPinned(t, group, "False", bundles.ReasonClusterSettingsChanged)
	if !strings.Contains(cond.Message, "pinnedRevision 1 was rendered under other cluster settings") {
		t.Errorf("Pinned condition message %q does not say why", cond.Message)
	}
	if got := f.Checksum(t, group); got != current {
		t.Errorf("a pin across the removal of an extra CA serves %s, want the current bundle %s", got, current)
	}
	if servesText(t, group, caLine) {
		t.Error("a pin across its removal serves the removed extra CA again")
	}

	// Within unchanged settings a pin works.
	f.Kubectl(t, "patch", "nodegroup", group, "--type=merge", "-p", `{"spec":{"update":{"pinnedRevision":2}}}`)
	f.WaitChecksum(t, group, func(s string) bool { return s == withoutCA })
	waitPinned(t, group, "True", bundles.ReasonRevisionServed)

	// A user who may patch NodeGroups may not allow a pin across the
	// change; the administrator may.
	const user = "pin-delegate"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{deckhousev1.SchemeGroupVersion.Group}, Resources: []string{"nodegroups"}, Verbs: []string{"get", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if _, err := f.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Kube.RbacV1().ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{}) })
	if _, err := f.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	delegate := versioned.NewForConfigOrDie(cfg).DeckhouseV1().NodeGroups()
	allow := []byte(`{"metadata":{"annotations":{"` + deckhousev1.PinAcrossClusterSettingsAnnotation + `":"1"}},"spec":{"update":{"pinnedRevision":1}}}`)
	framework.Poll(t, "the delegate's RBAC in effect", func(ctx context.Context) (bool, error) {
		_, err := delegate.Patch(ctx, group, types.MergePatchType, []byte(`{"metadata":{"labels":{"pin-delegate":"here"}}}`), metav1.PatchOptions{})
		return err == nil, nil
	})
	_, err = delegate.Patch(ctx, group, types.MergePatchType, allow, metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only a cluster administrator") {
		t.Fatalf("a user who may patch NodeGroups allowed a pin across a change of the cluster settings: %v", err)
	}
	f.Kubectl(t, "patch", "nodegroup", group, "--type=merge", "-p", string(allow))
	f.WaitChecksum(t, group, func(s string) bool { return s == withCA })
	waitPinned(t, group, "True", bundles.ReasonRevisionServed)
}

// extraCA is a self-signed CA certificate in PEM, and a line of its body.
func extraCA(t *testing.T) (pemText, bodyLine string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "removed-extra-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pemText = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return pemText, strings.Split(pemText, "\n")[1]
}

// servesText reports whether a step of group's served bundle contains s.
func servesText(t *testing.T, group, s string) bool {
	t.Helper()
	for _, script := range f.Bundle(t, group).Data {
		if strings.Contains(script, s) {
			return true
		}
	}
	return false
}
