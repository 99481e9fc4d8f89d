package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var apiServicesResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// TestCertificatesManageThemselves runs node-manager-controller with
// certificate management on and short lifetimes (CA 90s, rotated at 60s;
// serving certificates 30s, renewed at 20s; an 8s propagation delay). It
// creates the CA and bashible-api's Secret; a bashible-apiserver replica
// serves that Secret's files (copied into a directory by the test as the
// kubelet updates a Secret volume: a new timestamped directory, the ..data
// link swapped, the old directory removed); the APIService, labelled as the
// release labels it and pointed at that replica, gets its caBundle from the
// controller and becomes Available, and `kubectl get bashibles` works. Then,
// under continuous GETs through the aggregator, the serving certificate is
// renewed and the CA rotates (a new CA trusted, signing, the old one
// retired from the caBundle) with the same process serving throughout: no
// GET fails with a certificate error, in any sample.
//
// The suite's own replica is registered again when the test ends.
func TestCertificatesManageThemselves(t *testing.T) {
	// Longer than framework.Context: starting two processes and a whole
	// CA rotation under load.
	ctx, cancelAll := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancelAll)
	dyn := dynamic.NewForConfigOrDie(f.CP.AdminConfig())
	secrets := f.Kube.CoreV1().Secrets(deckhousev1.Namespace)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, name := range []string{deckhousev1.CertificateAuthoritySecret, deckhousev1.BashibleAPIServerTLSSecret, infrav1alpha1.CAPIWebhookSecret} {
			_ = secrets.Delete(ctx, name, metav1.DeleteOptions{})
		}
	})

	controller, err := f.Env.StartController(ctx, stack.ControllerOptions{Identity: "certificates", ExtraArgs: []string{
		"--leader-elect=false", "--manage-certificates",
		"--ca-lifetime=90s", "--serving-certificate-lifetime=30s", "--certificate-propagation-delay=8s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(controller.Stop)

	// 1. The CA and bashible-api's serving certificate.
	var first *corev1.Secret
	framework.Poll(t, "Secret "+deckhousev1.BashibleAPIServerTLSSecret, func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, deckhousev1.BashibleAPIServerTLSSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		first = s
		return err == nil, err
	})
	if first.Type != corev1.SecretTypeTLS {
		t.Errorf("%s has type %s, want %s", first.Name, first.Type, corev1.SecretTypeTLS)
	}
	ca, err := secrets.Get(ctx, deckhousev1.CertificateAuthoritySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the CA Secret: %v", err)
	}
	firstCA := certs(t, ca.Data[corev1.TLSCertKey])[0]
	leaf := certs(t, first.Data[corev1.TLSCertKey])[0]
	if err := leaf.CheckSignatureFrom(firstCA); err != nil {
		t.Fatalf("the serving certificate is not signed by the CA: %v", err)
	}
	want := bashiblev1alpha1.ServiceName + "." + deckhousev1.Namespace + ".svc"
	if err := leaf.VerifyHostname(want); err != nil {
		t.Errorf("the serving certificate is not for %s: %v", want, err)
	}

	// 2. A replica serving the Secret's files, kept as the kubelet keeps them.
	dir := t.TempDir()
	if err := projectSecret(dir, first.Data); err != nil {
		t.Fatal(err)
	}
	syncCtx, stopSync := context.WithCancel(ctx)
	var syncWG sync.WaitGroup
	var projected []string // resourceVersions copied to dir
	var projectedMu sync.Mutex
	syncWG.Go(func() {
		// A watch from the version already copied; errors end the test
		// below (nothing new is projected, the waits time out).
		rv := first.ResourceVersion
		for syncCtx.Err() == nil {
			w, err := secrets.Watch(syncCtx, metav1.ListOptions{FieldSelector: "metadata.name=" + deckhousev1.BashibleAPIServerTLSSecret, ResourceVersion: rv})
			if err != nil {
				select {
				case <-syncCtx.Done():
				case <-time.After(100 * time.Millisecond): // a retry's pace, not a wait for an event
				}
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if syncCtx.Err() != nil {
						return // the test is over: the watch ends with its context
					}
					t.Errorf("watching %s: %v", deckhousev1.BashibleAPIServerTLSSecret, ev.Object)
					w.Stop()
					return
				}
				s, ok := ev.Object.(*corev1.Secret)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				rv = s.ResourceVersion
				if err := projectSecret(dir, s.Data); err != nil {
					t.Errorf("projecting %s: %v", s.Name, err)
					continue
				}
				projectedMu.Lock()
				projected = append(projected, rv)
				projectedMu.Unlock()
			}
		}
	})
	t.Cleanup(func() { stopSync(); syncWG.Wait() })

	server, err := stack.StartAPIServer(ctx, f.CP, stack.APIServerOptions{Identity: "certificates", CertDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Stop)

	// 3. The APIService, labelled as the release labels it, pointed at the
	// replica; the controller writes its caBundle.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}},"spec":{"service":{"port":%d}}}`, deckhousev1.InjectCABundleLabel, server.Port)
	if _, err := dyn.Resource(apiServicesResource).Patch(ctx, bashiblev1alpha1.APIServiceName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Hand the APIService back to the suite's replica.
		ctx := context.Background()
		controller.Stop()
		unlabel := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, deckhousev1.InjectCABundleLabel)
		if _, err := dyn.Resource(apiServicesResource).Patch(ctx, bashiblev1alpha1.APIServiceName, types.MergePatchType, []byte(unlabel), metav1.PatchOptions{}); err != nil {
			t.Errorf("removing the label from the APIService: %v", err)
		}
		if err := replica.Register(ctx); err != nil {
			t.Errorf("registering the suite's replica again: %v", err)
		}
	})
	bundleOf := func(ctx context.Context) ([]*x509.Certificate, bool, error) {
		obj, err := dyn.Resource(apiServicesResource).Get(ctx, bashiblev1alpha1.APIServiceName, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		b64, _, _ := unstructured.NestedString(obj.Object, "spec", "caBundle")
		var bundle []*x509.Certificate
		if data, err := base64.StdEncoding.DecodeString(b64); err == nil {
			bundle = parseAll(data)
		}
		available := false
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Available" {
				available = m["status"] == "True"
			}
		}
		return bundle, available, nil
	}
	start := time.Now()
	framework.Poll(t, "APIService "+bashiblev1alpha1.APIServiceName+" Available with the controller's CA", func(ctx context.Context) (bool, error) {
		bundle, available, err := bundleOf(ctx)
		// The first CA, or (on a slow machine) it and its successor.
		return err == nil && available && len(bundle) > 0 && bundle[0].Equal(firstCA), err
	})
	t.Logf("APIService Available with the controller's caBundle %s after labelling", time.Since(start).Round(time.Millisecond))
	if out := f.Kubectl(t, "get", "bashibles"); !strings.Contains(out, "worker") {
		t.Fatalf("kubectl get bashibles through the aggregator:\n%s", out)
	}

	// 4. Continuous GETs through the aggregator while the certificates
	// rotate: until the CA has rotated and the old one left the caBundle.
	var (
		mu              sync.Mutex
		gets, certFails int
		otherFails      []string
		certErrors      []string
		unavailable     int
	)
	getCtx, stopGets := context.WithCancel(ctx)
	var getWG sync.WaitGroup
	getWG.Go(func() {
		for getCtx.Err() == nil {
			_, err := f.NM.BashibleV1alpha1().Bashibles().Get(getCtx, "worker", metav1.GetOptions{})
			if getCtx.Err() != nil {
				return
			}
			mu.Lock()
			gets++
			if err != nil {
				msg := err.Error()
				if isCertificateError(msg) {
					certFails++
					certErrors = append(certErrors, time.Since(start).Round(time.Millisecond).String()+": "+msg)
				} else {
					otherFails = append(otherFails, msg)
				}
			}
			mu.Unlock()
		}
	})
	getWG.Go(func() {
		for getCtx.Err() == nil {
			if _, available, err := bundleOf(getCtx); err == nil && !available {
				mu.Lock()
				unavailable++
				mu.Unlock()
			}
			select {
			case <-getCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	// The CA that signs now: the rotation waited for replaces it.
	ca, err = secrets.Get(ctx, deckhousev1.CertificateAuthoritySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startCA := certs(t, ca.Data[corev1.TLSCertKey])[0]
	rotated := time.Now()
	var newCA *x509.Certificate
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		bundle, _, err := bundleOf(ctx)
		if err != nil || len(bundle) != 1 || bundle[0].Equal(startCA) {
			return false, nil
		}
		served, err := servedCertificate(server.Port)
		if err != nil || served.CheckSignatureFrom(bundle[0]) != nil {
			return false, nil
		}
		newCA = bundle[0]
		return true, nil
	})
	if err != nil {
		stopGets()
		getWG.Wait()
		t.Fatalf("no complete CA rotation (a new CA signing, the old one gone from the APIService's caBundle, the replica serving a certificate of the new one) within 3 minutes: %v", err)
	}
	t.Logf("CA rotated and the old CA retired %s after the GETs started", time.Since(rotated).Round(time.Millisecond))
	stopGets()
	getWG.Wait()

	projectedMu.Lock()
	copies := len(projected)
	projectedMu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d GETs through the aggregator, %d failed with a certificate error, %d otherwise; %d samples of the APIService unavailable; the serving certificate was renewed %d times (new CA %s)",
		gets, certFails, len(otherFails), unavailable, copies, newCA.Subject.CommonName)
	if certFails > 0 {
		t.Errorf("%d of %d GETs through the aggregator failed with a certificate error:\n%s", certFails, gets, strings.Join(certErrors, "\n"))
	}
	if len(otherFails) > 0 {
		t.Errorf("%d GETs failed otherwise, first: %s", len(otherFails), otherFails[0])
	}
	if gets < 50 {
		t.Errorf("only %d GETs during the rotation", gets)
	}
	if copies < 2 {
		t.Errorf("the serving certificate was renewed %d times during the rotation; want a renewal and a re-issue by the new CA", copies)
	}
	if server.Exited() {
		t.Errorf("the replica exited: it must reload its certificate, not restart")
	}
	if _, err := secrets.Get(ctx, infrav1alpha1.CAPIWebhookSecret, metav1.GetOptions{}); err != nil {
		t.Errorf("Cluster API's serving certificate %s: %v", infrav1alpha1.CAPIWebhookSecret, err)
	}
}

// projectSecret writes data into dir as the kubelet updates a Secret
// volume: the files into a new timestamped directory, the ..data link
// swapped to it in one rename, a link per key to ..data/<key>, and the
// previous directory removed.
func projectSecret(dir string, data map[string][]byte) error {
	ts := ".." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := os.Mkdir(filepath.Join(dir, ts), 0o700); err != nil {
		return err
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, ts, k), v, 0o600); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for k := range data {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return err
			}
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// servedCertificate is the certificate the replica on port serves now.
func servedCertificate(port int) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // inspected, not trusted
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func isCertificateError(msg string) bool {
	for _, s := range []string{"x509", "certificate", "tls:"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func certs(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	c := parseAll(data)
	if len(c) == 0 {
		t.Fatalf("no certificate in %q", data)
	}
	return c
}

func parseAll(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(bytes.TrimSpace(data))
		if b == nil {
			return out
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// TestCertManagerComponent: the optional component manifests/cert-manager,
// added to the manifests, renders the Issuers and Certificates, asks
// cert-manager's cainjector for the caBundles of the APIService, the
// preview webhook and the CRDs' conversion webhook, and turns node-manager-controller's own management off;
// everything it changes passes a server-side dry run. cert-manager's own
// kinds are left out of the dry run: their CRDs come from no Go module the
// project depends on, and the tests download nothing else.
func TestCertManagerComponent(t *testing.T) {
	dir := t.TempDir()
	// kustomize takes resources and components by relative paths only.
	manifests, err := filepath.Rel(dir, filepath.Join(f.Root, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents: [%s]\n",
		manifests, filepath.Join(manifests, "cert-manager"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	rendered := filepath.Join(t.TempDir(), "rendered.yaml")
	out, err := f.KubectlErr(t, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir, "--output", rendered)
	if err != nil {
		t.Fatalf("kubectl kustomize with manifests/cert-manager: %v\n%s", err, out)
	}
	objs, err := controlplane.ReadManifests(rendered)
	if err != nil {
		t.Fatal(err)
	}
	var rest, converting []string
	found := map[string]bool{}
	for _, o := range objs {
		id := o.GetKind() + "/" + o.GetName()
		if o.GroupVersionKind().Group == "cert-manager.io" {
			found[id] = true
			continue
		}
		if o.GetAnnotations()["cert-manager.io/inject-ca-from"] == deckhousev1.Namespace+"/"+deckhousev1.BashibleAPIServerTLSSecret {
			found["inject "+id] = true
		}
		// A CRD whose conversion webhook is bashible-apiserver's trusts its CA.
		if svc, _, _ := unstructured.NestedString(o.Object, "spec", "conversion", "webhook", "clientConfig", "service", "name"); o.GetKind() == "CustomResourceDefinition" && svc == bashiblev1alpha1.ServiceName {
			converting = append(converting, "inject "+id)
		}
		if o.GetKind() == "Deployment" && o.GetName() == deckhousev1.NodeManagerControllerName {
			var args []string
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if len(containers) > 0 {
				args, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
			}
			found["off"] = len(args) > 0 && args[len(args)-1] == "--manage-certificates=false"
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, string(data))
	}
	wants := append([]string{
		"Certificate/" + deckhousev1.CertificateAuthoritySecret, "Certificate/" + deckhousev1.BashibleAPIServerTLSSecret,
		"Certificate/" + infrav1alpha1.CAPIWebhookSecret, "Issuer/" + deckhousev1.CertificateAuthoritySecret,
		"inject APIService/" + bashiblev1alpha1.APIServiceName, "inject ValidatingWebhookConfiguration/" + bashiblev1alpha1.PreviewWebhookConfigurationName,
		"off",
	}, converting...)
	for _, want := range wants {
		if !found[want] {
			t.Errorf("the rendering with manifests/cert-manager lacks %s", want)
		}
	}
	file := filepath.Join(t.TempDir(), "without-cert-manager-kinds.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(rest, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := f.KubectlErr(t, "apply", "--dry-run=server", "-f", file); err != nil {
		t.Fatalf("server-side dry run of the manifests with manifests/cert-manager: %v\n%s", err, out)
	}
}
