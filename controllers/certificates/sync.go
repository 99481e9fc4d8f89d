package certificates

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// sync reads everything, decides (Decide) and carries the plan out.
func (c *Controller) sync(ctx context.Context, _ string) error {
	now := c.d.Clock.Now()
	ns := c.d.Namespace
	caSecret, err := c.secret(deckhousev1.CertificateAuthoritySecret)
	if err != nil {
		return err
	}
	auth, signing, next := readAuthority(caSecret)
	leaves := make([]Leaf, 0, len(services))
	leafSecrets := map[string]*corev1.Secret{}
	for _, svc := range services {
		s, err := c.secret(svc.Secret)
		if err != nil {
			return err
		}
		leafSecrets[svc.Name] = s
		leaves = append(leaves, readLeaf(svc.Name, svc.dnsNames(ns), s))
	}
	objs, err := c.consumerObjects()
	if err != nil {
		return err
	}
	consumers := make([]Consumer, 0, len(objs))
	for _, o := range objs {
		consumers = append(consumers, o.consumer())
	}

	plan := Decide(now, c.opts, auth, leaves, consumers)
	log := klog.FromContext(ctx)
	for _, w := range plan.Waiting {
		log.V(2).Info("Waiting", "reason", w)
	}
	if plan.CA != CANone {
		return c.writeAuthority(ctx, now, plan, caSecret, auth, signing, next)
	}
	for _, o := range objs {
		if err := c.writeBundles(ctx, o, auth.Trusted); err != nil {
			return err
		}
	}
	trusted := encodeCerts(auth.Trusted)
	for _, svc := range services {
		if why, ok := plan.Issue[svc.Name]; ok {
			leaf, err := issueLeaf(signing, svc.dnsNames(ns), now, c.opts.LeafLifetime)
			if err != nil {
				return err
			}
			if err := c.writeSecret(ctx, leafSecrets[svc.Name], svc.Secret, map[string][]byte{
				corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM, corev1.ServiceAccountRootCAKey: trusted,
			}); err != nil {
				return err
			}
			log.Info("Issued a serving certificate", "service", svc.Name, "secret", ns+"/"+svc.Secret, "reason", why,
				"notAfter", leaf.Cert.NotAfter.UTC().Format(time.RFC3339), "ca", signing.Cert.Subject.CommonName)
		}
	}
	for _, name := range plan.Rebundle {
		for _, svc := range services {
			if svc.Name != name {
				continue
			}
			data := map[string][]byte{}
			for k, v := range leafSecrets[name].Data {
				data[k] = v
			}
			data[corev1.ServiceAccountRootCAKey] = trusted
			if err := c.writeSecret(ctx, leafSecrets[name], svc.Secret, data); err != nil {
				return err
			}
		}
	}
	if !plan.RecheckAt.IsZero() {
		c.queue.AddAfter(key, plan.RecheckAt.Sub(now))
	}
	return nil
}

// secret is a Secret of the namespace from the cache; nil if absent.
func (c *Controller) secret(name string) (*corev1.Secret, error) {
	s, err := c.secrets.Secrets(c.d.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return s, err
}

// readAuthority reads the CA Secret (nil: absent).
func readAuthority(s *corev1.Secret) (Authority, *keyPair, *keyPair) {
	if s == nil {
		return Authority{}, nil, nil
	}
	a := Authority{Trusted: parseCerts(s.Data[corev1.ServiceAccountRootCAKey]), RenewBefore: renewBefore(s)}
	signing := parseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	next := parseKeyPair(s.Data[deckhousev1.CANextCertKey], s.Data[deckhousev1.CANextKeyKey])
	if signing != nil {
		a.Signing = signing.Cert
	}
	if next != nil {
		a.Next = next.Cert
	}
	return a, signing, next
}

// readLeaf reads a serving certificate's Secret (nil: absent).
func readLeaf(svc string, dnsNames []string, s *corev1.Secret) Leaf {
	l := Leaf{Service: svc, DNSNames: dnsNames}
	if s == nil {
		return l
	}
	if pair := parseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); pair != nil {
		l.Cert = pair.Cert
	}
	l.Bundle = parseCerts(s.Data[corev1.ServiceAccountRootCAKey])
	l.RenewBefore = renewBefore(s)
	return l
}

func renewBefore(s *corev1.Secret) time.Time {
	v, ok := s.Annotations[deckhousev1.RenewBeforeAnnotation]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		klog.InfoS("Ignoring an annotation that is not an RFC 3339 time", "secret", s.Namespace+"/"+s.Name,
			"annotation", deckhousev1.RenewBeforeAnnotation, "value", v, "err", err)
		return time.Time{}
	}
	return t
}

// writeAuthority carries out the plan's CA step.
func (c *Controller) writeAuthority(ctx context.Context, now time.Time, plan Plan, s *corev1.Secret, a Authority, signing, next *keyPair) error {
	from := ""
	if signing != nil {
		from = signing.Cert.Subject.CommonName
	}
	signing, next, trusted, err := caStep(now, c.opts.CALifetime, plan, a.Trusted, signing, next)
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	if s != nil {
		for k, v := range s.Data {
			data[k] = v
		}
	}
	data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey] = signing.CertPEM, signing.KeyPEM
	delete(data, deckhousev1.CANextCertKey)
	delete(data, deckhousev1.CANextKeyKey)
	if next != nil {
		data[deckhousev1.CANextCertKey], data[deckhousev1.CANextKeyKey] = next.CertPEM, next.KeyPEM
	}
	data[corev1.ServiceAccountRootCAKey] = encodeCerts(trusted)
	if err := c.writeSecret(ctx, s, deckhousev1.CertificateAuthoritySecret, data); err != nil {
		return err
	}
	names := make([]string, 0, len(trusted))
	for _, t := range trusted {
		names = append(names, t.Subject.CommonName)
	}
	klog.FromContext(ctx).Info("Changed the CA", "step", plan.CA.String(), "secret", c.d.Namespace+"/"+deckhousev1.CertificateAuthoritySecret,
		"signedBy", from, "signing", signing.Cert.Subject.CommonName, "trusted", names)
	return nil
}

// writeSecret creates or updates a kubernetes.io/tls Secret of the
// namespace with data (old is what the cache holds, nil if absent).
func (c *Controller) writeSecret(ctx context.Context, old *corev1.Secret, name string, data map[string][]byte) error {
	api := c.d.Kube.CoreV1().Secrets(c.d.Namespace)
	if old == nil {
		_, err := api.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.d.Namespace,
				Labels: map[string]string{deckhousev1.ManagedByLabel: deckhousev1.NodeManagerControllerName}},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// The cache had not seen it yet (our own write, or another's):
			// its event queues a sync that decides on what is there.
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating Secret %s/%s: %w", c.d.Namespace, name, err)
		}
		return nil
	}
	if old.Type != corev1.SecretTypeTLS {
		return fmt.Errorf("the Secret %s/%s has type %s, not %s: delete it and node-manager-controller makes it anew", c.d.Namespace, name, old.Type, corev1.SecretTypeTLS)
	}
	s := old.DeepCopy()
	s.Data = data
	if _, err := api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating Secret %s/%s: %w", c.d.Namespace, name, err)
	}
	return nil
}

// clientConfig is one client configuration of a consumer that points at
// one of the Services: where it is (a JSON pointer) and its bundle.
type clientConfig struct {
	path   string
	tests  map[string]string // JSON pointer → value the patch checks first
	bundle []byte
}

// consumerObject is a labelled object with its client configurations
// that point at the Services.
type consumerObject struct {
	resource        schema.GroupVersionResource
	name            string
	resourceVersion string
	configs         []clientConfig
}

func (o consumerObject) consumer() Consumer {
	c := Consumer{Name: o.resource.Resource + "/" + o.name}
	for _, cc := range o.configs {
		c.Bundles = append(c.Bundles, parseCerts(cc.bundle))
	}
	return c
}

// consumerObjects lists the labelled objects and their client
// configurations that point at one of the Services.
func (c *Controller) consumerObjects() ([]consumerObject, error) {
	var out []consumerObject
	for _, r := range consumerResources {
		objs, err := c.listers[r].List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if o := c.clientConfigs(r, u); len(o.configs) > 0 {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// clientConfigs finds u's client configurations (at the path each kind
// keeps them) that point at one of the Services.
func (c *Controller) clientConfigs(r schema.GroupVersionResource, u *unstructured.Unstructured) consumerObject {
	o := consumerObject{resource: r, name: u.GetName(), resourceVersion: u.GetResourceVersion()}
	add := func(path string, cc map[string]any, extra map[string]string) {
		name, _, _ := unstructured.NestedString(cc, "service", "name")
		ns, _, _ := unstructured.NestedString(cc, "service", "namespace")
		if ns != c.d.Namespace || !isService(name) {
			return
		}
		b64, _, _ := unstructured.NestedString(cc, "caBundle")
		bundle, _ := base64.StdEncoding.DecodeString(b64)
		tests := map[string]string{path + "/service/name": name, path + "/service/namespace": ns}
		for k, v := range extra {
			tests[k] = v
		}
		o.configs = append(o.configs, clientConfig{path: path, tests: tests, bundle: bundle})
	}
	switch r {
	case apiServicesResource:
		if spec, ok, _ := unstructured.NestedMap(u.Object, "spec"); ok {
			add("/spec", spec, nil)
		}
	case validatingResource, mutatingResource:
		hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for i, h := range hooks {
			m, _ := h.(map[string]any)
			cc, ok, _ := unstructured.NestedMap(m, "clientConfig")
			if !ok {
				continue
			}
			name, _ := m["name"].(string)
			prefix := "/webhooks/" + strconv.Itoa(i)
			add(prefix+"/clientConfig", cc, map[string]string{prefix + "/name": name})
		}
	case crdsResource:
		if cc, ok, _ := unstructured.NestedMap(u.Object, "spec", "conversion", "webhook", "clientConfig"); ok {
			add("/spec/conversion/webhook/clientConfig", cc, nil)
		}
	}
	return o
}

func isService(name string) bool {
	for _, s := range services {
		if s.Name == name {
			return true
		}
	}
	return false
}

// writeBundles sets the caBundle of o's client configurations that differ
// from trusted, with one JSON patch that first tests that o is as it was
// seen (its resourceVersion; each configuration where it was, pointing at
// the same Service): a change meanwhile fails it, and the retry decides on
// the new state.
func (c *Controller) writeBundles(ctx context.Context, o consumerObject, trusted []*x509.Certificate) error {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	var ops []op
	for _, cc := range o.configs {
		if !NeedsBundle(parseCerts(cc.bundle), trusted) {
			continue
		}
		for p, v := range cc.tests {
			ops = append(ops, op{Op: "test", Path: p, Value: v})
		}
		ops = append(ops, op{Op: "add", Path: cc.path + "/caBundle", Value: base64.StdEncoding.EncodeToString(encodeCerts(trusted))})
	}
	if len(ops) == 0 {
		return nil
	}
	if o.resourceVersion != "" { // always, but in fake clients
		ops = append([]op{{Op: "test", Path: "/metadata/resourceVersion", Value: o.resourceVersion}}, ops...)
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if _, err := c.d.Dynamic.Resource(o.resource).Patch(ctx, o.name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("writing the caBundle of %s %s: %w", o.resource.Resource, o.name, err)
	}
	klog.FromContext(ctx).Info("Wrote the caBundle", "resource", o.resource.Resource, "name", o.name, "cas", len(trusted))
	return nil
}
