package certificates

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

func object(apiVersion, kind, name string, labelled bool, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	if labelled {
		u.SetLabels(map[string]string{deckhousev1.InjectCABundleLabel: "true"})
	}
	return u
}

func svcRef(name, ns string) map[string]any {
	return map[string]any{"service": map[string]any{"name": name, "namespace": ns, "port": int64(443)}}
}

// TestTheControllerWritesOnlyItsClientConfigs runs sync over fake clients:
// the CA first, then the caBundles of the labelled objects' client
// configurations that call our Services (and of no other), then the
// serving certificates.
func TestTheControllerWritesOnlyItsClientConfigs(t *testing.T) {
	ns := deckhousev1.Namespace
	objs := []runtime.Object{
		object("apiregistration.k8s.io/v1", "APIService", bashiblev1alpha1.APIServiceName, true,
			map[string]any{"spec": svcRef(bashiblev1alpha1.ServiceName, ns)}),
		object("apiregistration.k8s.io/v1", "APIService", "v1.unlabelled.example.com", false,
			map[string]any{"spec": svcRef(bashiblev1alpha1.ServiceName, ns)}),
		object("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", bashiblev1alpha1.PreviewWebhookConfigurationName, true,
			map[string]any{"webhooks": []any{
				map[string]any{"name": "foreign.example.com", "clientConfig": svcRef("foreign", ns)},
				map[string]any{"name": bashiblev1alpha1.PreviewWebhookName, "clientConfig": svcRef(bashiblev1alpha1.ServiceName, ns)},
				map[string]any{"name": "elsewhere.example.com", "clientConfig": svcRef(bashiblev1alpha1.ServiceName, "elsewhere")},
			}}),
		object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "machines.cluster.x-k8s.io", true,
			map[string]any{"spec": map[string]any{"conversion": map[string]any{"strategy": "Webhook",
				"webhook": map[string]any{"clientConfig": svcRef(infrav1alpha1.CAPIWebhookService, ns)}}}}),
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		apiServicesResource: "APIServiceList", validatingResource: "ValidatingWebhookConfigurationList",
		mutatingResource: "MutatingWebhookConfigurationList", crdsResource: "CustomResourceDefinitionList",
	}, objs...)
	kube := kubefake.NewClientset()
	opts := manager.NewOptions()
	d := manager.NewDepsForClients(kube, nmfake.NewSimpleClientset(), opts, clocktesting.NewFakeClock(time.Now()), prometheus.NewRegistry())
	d.Dynamic = dyn
	c := New(d, NewOptions())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.Informers.Namespace.Start(ctx.Done())
	c.consumers.Start(ctx.Done())
	if !manager.HasSynced(ctx, "test", c.synced...) {
		t.Fatal("informers did not sync")
	}
	// Sync until the serving certificates exist, letting the caches catch
	// up with each write.
	syncs := 0
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		syncs++
		if err := c.sync(ctx, key); err != nil {
			return false, err
		}
		for _, svc := range services {
			if s, _ := c.secret(svc.Secret); s == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("no serving certificates after %d syncs: %v", syncs, err)
	}

	caSecret, err := kube.CoreV1().Secrets(ns).Get(ctx, deckhousev1.CertificateAuthoritySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := parseCerts(caSecret.Data[corev1.TLSCertKey])[0]
	// bundle is the caBundle at path, or with hook >= 0 that of the
	// webhook of that index.
	bundle := func(resource schema.GroupVersionResource, name string, hook int, path ...string) []byte {
		t.Helper()
		u, err := dyn.Resource(resource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var b64 string
		if hook >= 0 {
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			b64, _, _ = unstructured.NestedString(hooks[hook].(map[string]any), "clientConfig", "caBundle")
		} else {
			b64, _, _ = unstructured.NestedString(u.Object, path...)
		}
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	trusts := func(what string, data []byte, want bool) {
		t.Helper()
		certs := parseCerts(data)
		if got := len(certs) == 1 && certs[0].Equal(ca); got != want {
			t.Errorf("%s: trusts the CA %v, want %v (%d certificates)", what, got, want, len(certs))
		}
	}
	trusts("the labelled APIService", bundle(apiServicesResource, bashiblev1alpha1.APIServiceName, -1, "spec", "caBundle"), true)
	trusts("an unlabelled APIService", bundle(apiServicesResource, "v1.unlabelled.example.com", -1, "spec", "caBundle"), false)
	trusts("a webhook of another Service", bundle(validatingResource, bashiblev1alpha1.PreviewWebhookConfigurationName, 0), false)
	trusts("the preview webhook", bundle(validatingResource, bashiblev1alpha1.PreviewWebhookConfigurationName, 1), true)
	trusts("a webhook of a Service of that name in another namespace", bundle(validatingResource, bashiblev1alpha1.PreviewWebhookConfigurationName, 2), false)
	trusts("the CRD's conversion webhook", bundle(crdsResource, "machines.cluster.x-k8s.io", -1, "spec", "conversion", "webhook", "clientConfig", "caBundle"), true)

	for _, svc := range services {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, svc.Secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leaf := parseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if s.Type != corev1.SecretTypeTLS || leaf == nil || leaf.Cert.CheckSignatureFrom(ca) != nil || leaf.Cert.VerifyHostname(svc.Name+"."+ns+".svc") != nil {
			t.Errorf("Secret %s: type %s, a key pair %v, not signed by the CA or not for %s.%s.svc", svc.Secret, s.Type, leaf != nil, svc.Name, ns)
		}
		// The CRDs' conversion webhook calls bashible-apiserver through a
		// Service of its own.
		if conversion := bashiblev1alpha1.ConversionServiceName + "." + ns + ".svc"; svc.Secret == deckhousev1.BashibleAPIServerTLSSecret &&
			leaf != nil && leaf.Cert.VerifyHostname(conversion) != nil {
			t.Errorf("Secret %s: not for %s, the conversion webhook's Service", svc.Secret, conversion)
		}
		trusts("ca.crt of "+svc.Secret, s.Data[corev1.ServiceAccountRootCAKey], true)
	}
	// Nothing more to do: another sync writes nothing.
	writes := len(kube.Actions()) + len(dyn.Actions())
	if err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := len(kube.Actions()) + len(dyn.Actions()) - writes; n > 0 {
		t.Errorf("a sync with nothing to do made %d requests: %v", n, append(kube.Actions(), dyn.Actions()...)[writes:])
	}
}
