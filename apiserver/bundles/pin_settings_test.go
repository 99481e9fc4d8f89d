package bundles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// testExtraCA is a self-signed CA certificate in PEM, and a line of its
// body that a bundle trusting it contains.
func testExtraCA(t *testing.T) (pemText, bodyLine string) {
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

// setClusterConfiguration writes kube-system/d8-cluster-configuration and
// waits until the controller's informer has it.
func (p *publisher) setClusterConfiguration(yaml string) {
	p.t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.ClusterConfigurationSecret, Namespace: metav1.NamespaceSystem},
		Data:       map[string][]byte{deckhousev1.ClusterConfigurationKey: []byte(yaml)},
	}
	secrets := p.kube.CoreV1().Secrets(metav1.NamespaceSystem)
	_, err := secrets.Create(p.ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(p.ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.waitFor("the informer to see the cluster configuration", func() bool {
		s, err := p.secretsKS.Secrets(metav1.NamespaceSystem).Get(deckhousev1.ClusterConfigurationSecret)
		return err == nil && string(s.Data[deckhousev1.ClusterConfigurationKey]) == yaml
	})
}

// allowAcross sets (rev > 0) or removes worker's annotation allowing a pin
// across a change of the cluster settings, and waits for the informer.
func (p *publisher) allowAcross(rev int64) {
	p.t.Helper()
	ng, err := p.nm.DeckhouseV1().NodeGroups().Get(p.ctx, "worker", metav1.GetOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	if ng.Annotations == nil {
		ng.Annotations = map[string]string{}
	}
	want := ""
	if rev > 0 {
		want = strconv.FormatInt(rev, 10)
		ng.Annotations[deckhousev1.PinAcrossClusterSettingsAnnotation] = want
	} else {
		delete(ng.Annotations, deckhousev1.PinAcrossClusterSettingsAnnotation)
	}
	if _, err := p.nm.DeckhouseV1().NodeGroups().Update(p.ctx, ng, metav1.UpdateOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.waitFor("the informer to see the annotation", func() bool {
		got, err := p.nodeGroups.Get("worker")
		return err == nil && got.Annotations[deckhousev1.PinAcrossClusterSettingsAnnotation] == want
	})
}

// servesText reports whether any script worker's nodes receive contains s.
func (p *publisher) servesText(s string) bool {
	b, ok := p.cfg.Store.Get("worker")
	if !ok {
		return false
	}
	raw, err := json.Marshal(b.Steps)
	if err != nil {
		p.t.Fatal(err)
	}
	return strings.Contains(b.Bashible.String(), s) || strings.Contains(string(raw), s) || strings.Contains(b.Bootstrap, s)
}

// A pin is a rollback of the group's configuration, not of the cluster's:
// a revision rendered while the cluster trusted an extra CA that an
// administrator has removed since is not served again. The nodes keep the
// current bundle, and the Pinned condition says why (False,
// ClusterSettingsChanged). A pin within unchanged cluster settings still
// works, and a cluster administrator's annotation naming the pinned
// revision allows the pin across the change (an annotation naming another
// revision allows nothing).
func TestAPinAcrossAClusterSettingsChangeIsRefused(t *testing.T) {
	kube := fakeKube()
	p := newPublisher(t, kube, fakeNodeManager(group("worker")))
	p.revisions = newRevisions(kube, testNamespace, 10)
	ca, caLine := testExtraCA(t)
	caJSON, err := json.Marshal(ca)
	if err != nil {
		t.Fatal(err)
	}
	p.setClusterConfiguration("extraCACertificates: [" + string(caJSON) + "]\n")
	p.lead()
	p.sync()
	p.waitFor("revision 1, trusting the extra CA", func() bool { return p.served("worker") != "" })
	if !p.servesText(caLine) {
		t.Fatal("the bundle rendered with an extra CA does not contain it: the test proves nothing")
	}
	withCA := p.served("worker")

	// The administrator removes the CA: revision 2, without it.
	p.setClusterConfiguration("extraCACertificates: []\n")
	p.sync()
	p.waitFor("revision 2, without the extra CA", func() bool { return p.served("worker") != withCA })
	if p.servesText(caLine) {
		t.Fatal("the extra CA is still served after its removal")
	}
	// Revision 3: a configuration change under the same settings.
	sums := p.publishConfigs(1, 1)
	current := sums[0]

	p.pin(1)
	p.sync()
	p.waitFor("the Pinned condition", func() bool { return p.pinnedCondition() != nil })
	if got := p.served("worker"); got != current {
		t.Errorf("a pin across the removal of an extra CA serves %s, want the current bundle %s", got, current)
	}
	if p.servesText(caLine) {
		t.Error("a pin across its removal serves the removed extra CA again")
	}
	c := p.pinnedCondition()
	if c.Reason != ReasonClusterSettingsChanged || !strings.Contains(c.Message, "pinnedRevision 1 was rendered under other cluster settings") ||
		!strings.Contains(c.Message, deckhousev1.PinAcrossClusterSettingsAnnotation+"=1") {
		t.Errorf("Pinned condition %s: %s; want False/%s naming the revision and the annotation", c.Reason, c.Message, ReasonClusterSettingsChanged)
	}
	if b, _ := p.cfg.Store.Get("worker"); b.PinnedRevision != 0 || b.Revision != 3 {
		t.Errorf("serving revision %d pinned %d, want the current revision 3, not pinned", b.Revision, b.PinnedRevision)
	}

	// A pin within the current settings works.
	p.pin(2)
	p.sync()
	p.waitFor("revision 2 to be served", func() bool { b, _ := p.cfg.Store.Get("worker"); return b.Revision == 2 && b.PinnedRevision == 2 })
	if c := p.pinnedCondition(); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonRevisionServed {
		t.Errorf("Pinned condition %+v, want True/%s for a pin within unchanged settings", c, ReasonRevisionServed)
	}

	// An allowance for another revision allows nothing; one for the pinned
	// revision serves it.
	p.allowAcross(2)
	p.pin(1)
	p.sync()
	p.waitFor("the pin to 1 refused again", func() bool {
		c := p.pinnedCondition()
		return c != nil && c.Reason == ReasonClusterSettingsChanged && p.served("worker") == current
	})
	p.allowAcross(1)
	p.sync()
	p.waitFor("revision 1 to be served as allowed", func() bool { return p.served("worker") == withCA })
	if c := p.pinnedCondition(); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Pinned condition %+v, want True once an administrator allowed the pin", c)
	}
}
