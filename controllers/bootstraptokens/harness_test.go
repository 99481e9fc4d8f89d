package bootstraptokens

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// harness is the controller on fake clientsets and a fake clock, with its
// informers running. sync runs one reconcile once the caches show what the
// fake API holds, so every test step sees its predecessors' writes.
type harness struct {
	t      *testing.T
	ctx    context.Context
	kube   *kubefake.Clientset
	nm     *nmfake.Clientset
	clock  *testclock.FakeClock
	events *events.FakeRecorder
	deps   *manager.Deps
	c      *Controller
}

var t0 = time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)

func newHarness(t *testing.T, now time.Time, objs ...*deckhousev1.NodeGroup) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube := kubefake.NewClientset(caConfigMapObject(testCA(t)), endpointSlice("10.0.0.1", "10.0.0.2"))
	// The field-managed NewClientset has no structured-merge schema for
	// NodeGroup and refuses its writes.
	nm := nmfake.NewSimpleClientset()
	for _, ng := range objs {
		if _, err := nm.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clk := testclock.NewFakeClock(now)
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clk, prometheus.NewRegistry())
	rec := events.NewFakeRecorder(100)
	d.Recorder = rec
	c := New(d)
	d.Informers.KubeSystem.Start(ctx.Done())
	d.Informers.Tokens.Start(ctx.Done())
	d.Informers.Namespace.Start(ctx.Done())
	d.Informers.Default.Start(ctx.Done())
	d.Informers.NodeManager.Start(ctx.Done())
	if !manager.HasSynced(ctx, "test", c.synced...) {
		t.Fatal("caches did not sync")
	}
	return &harness{t: t, ctx: ctx, kube: kube, nm: nm, clock: clk, events: rec, deps: d, c: c}
}

func group(name string, nodeType deckhousev1.NodeType) *deckhousev1.NodeGroup {
	return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: nodeType}}
}

func caConfigMapObject(ca string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.RootCAConfigMap, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{caKey: ca},
	}
}

func endpointSlice(addresses ...string) *discoveryv1.EndpointSlice {
	https := "https"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: kubernetesService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &https, Port: ptr.To[int32](6443)}},
	}
	for _, a := range addresses {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// testCA is a self-signed CA certificate in PEM.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// settle waits until every lister the controller reads shows exactly what
// the fake API holds.
func (h *harness) settle() {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, namespace := range []string{metav1.NamespaceSystem, deckhousev1.Namespace} {
			api, err := h.kube.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			lister := h.c.tokens
			if namespace == deckhousev1.Namespace {
				lister = h.c.manual
			}
			cached, err := lister.Secrets(namespace).List(labels.Everything())
			if err != nil || len(cached) != len(api.Items) {
				return false, err
			}
			for _, s := range api.Items {
				s.ManagedFields = nil // the informers drop them (manager.slim)
				got, err := lister.Secrets(namespace).Get(s.Name)
				if err != nil || !equality.Semantic.DeepEqual(got, &s) {
					return false, nil
				}
			}
		}
		groups, err := h.nm.DeckhouseV1().NodeGroups().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		cachedGroups, _ := h.c.groups.List(labels.Everything())
		if len(cachedGroups) != len(groups.Items) {
			return false, nil
		}
		for _, ng := range groups.Items {
			ng.ManagedFields = nil
			got, err := h.c.groups.Get(ng.Name)
			if err != nil || !equality.Semantic.DeepEqual(got, &ng) {
				return false, nil
			}
		}
		cm, err := h.kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, deckhousev1.RootCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cm.ManagedFields = nil
		cachedCM, err := h.c.configMap.ConfigMaps(metav1.NamespaceSystem).Get(deckhousev1.RootCAConfigMap)
		if err != nil || !equality.Semantic.DeepEqual(cachedCM, cm) {
			return false, nil
		}
		slice, err := h.kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		slice.ManagedFields = nil
		cachedSlice, err := h.c.slices.EndpointSlices(metav1.NamespaceDefault).Get("kubernetes")
		return err == nil && equality.Semantic.DeepEqual(cachedSlice, slice), nil
	})
	if err != nil {
		h.t.Fatalf("caches did not catch up with the fake API: %v", err)
	}
}

// sync reconciles group once the caches are current.
func (h *harness) sync(group string) {
	h.t.Helper()
	h.settle()
	if err := h.c.sync(h.ctx, group); err != nil {
		h.t.Fatalf("sync %s: %v", group, err)
	}
}

// tokens are the group's tokens in the fake API, oldest first.
func (h *harness) tokens(group string) []Token {
	h.t.Helper()
	list, err := h.kube.CoreV1().Secrets(metav1.NamespaceSystem).List(h.ctx, metav1.ListOptions{
		LabelSelector: deckhousev1.TokenNodeGroupLabel + "=" + group,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []Token
	for i := range list.Items {
		tok, err := parseToken(&list.Items[i])
		if err != nil {
			h.t.Fatalf("token Secret %s: %v", list.Items[i].Name, err)
		}
		out = append(out, tok)
	}
	sortTokens(out)
	return out
}

// manualSecret is the group's manual-bootstrap Secret, nil if there is none.
func (h *harness) manualSecret(group string) *corev1.Secret {
	h.t.Helper()
	return h.secret(SecretName(group))
}

// secret is Secret name of node-manager's namespace, or nil.
func (h *harness) secret(name string) *corev1.Secret {
	h.t.Helper()
	s, err := h.kube.CoreV1().Secrets(deckhousev1.Namespace).Get(h.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// writes counts the create, update and delete calls on Secrets in namespace.
func (h *harness) writes(namespace string) int {
	n := 0
	for _, a := range h.kube.Actions() {
		if a.GetResource().Resource == "secrets" && a.GetNamespace() == namespace &&
			(a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "delete" || a.GetVerb() == "patch") {
			n++
		}
	}
	return n
}

// putToken stores a token Secret for group directly, as an earlier run
// (or another tool) would have.
func (h *harness) putToken(group string, expires time.Time) Token {
	h.t.Helper()
	tok, err := newToken(expires, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.kube.CoreV1().Secrets(metav1.NamespaceSystem).Create(h.ctx, tok.secret(group), metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	return tok
}

// issuedEvents drains the recorded events.
func (h *harness) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
