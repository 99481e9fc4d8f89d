package release

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/conversion"
	"github.com/node-manager/node-manager/hack/controlplane"
)

// testRegistry is where the test's release says the images are.
const testRegistry = "registry.example:5000/node-manager"

// injectCABundleLabel is the label by which node-manager's certificate
// controller finds the objects whose caBundle it writes.
var injectCABundleLabel = deckhousev1.InjectCABundleLabel

// fakeDigests writes the fake digests file into a temporary directory.
func fakeDigests(t testing.TB) string {
	t.Helper()
	path, err := WriteFakeDigests(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// testOptions are the options of a release of this repository with the
// fake digests; the test fails when bin/kubectl or the Cluster API module
// is not there.
func testOptions(t testing.TB) Options {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(root, "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("the release is built with bin/kubectl's kustomize: %v (make bin/kubectl)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	module, _, err := ClusterAPIModule(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	digests, err := ReadDigests(fakeDigests(t))
	if err != nil {
		t.Fatal(err)
	}
	return Options{Root: root, Kubectl: kubectl, ClusterAPIModule: module, Registry: testRegistry, Digests: digests}
}

// release is a generated release read back from its YAML, as kubectl
// would read it.
type release struct {
	t    *testing.T
	objs []*unstructured.Unstructured
}

func buildRelease(t *testing.T, o Options) *release {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	objs, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Encode("test", objs)
	if err != nil {
		t.Fatal(err)
	}
	back, err := controlplane.DecodeYAML(data)
	if err != nil {
		t.Fatalf("the release does not read back: %v", err)
	}
	return &release{t: t, objs: back}
}

func (r *release) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r *release) find(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range r.ofKind(kind) {
		if o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &v); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

func flagValue(args []string, flag string) (string, bool) {
	for _, a := range args {
		if a == flag {
			return "", true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestReleasePinsEveryImage: every container image of every workload in the
// release, and the fencing agents' image node-manager-controller is told
// with --fencing-agent-image, is one of node-manager's images pinned by the
// digest make images wrote; each of the six images is used.
func TestReleasePinsEveryImage(t *testing.T) {
	o := testOptions(t)
	r := buildRelease(t, o)
	used := map[string]bool{}
	check := func(obj *unstructured.Unstructured, container, what, image string) {
		for name, digest := range o.Digests {
			if image == testRegistry+"/"+name+"@"+digest {
				used[name] = true
				return
			}
		}
		t.Errorf("%s %s/%s, container %s: %s %q is not one of node-manager's images pinned by digest", obj.GetKind(), obj.GetNamespace(), obj.GetName(), container, what, image)
	}
	workloads := 0
	for _, obj := range r.objs {
		walkContainers(obj.Object, func(c map[string]any) {
			workloads++
			name, _ := c["name"].(string)
			image, _ := c["image"].(string)
			check(obj, name, "image", image)
			args, _ := c["args"].([]any)
			for _, a := range args {
				if v, ok := strings.CutPrefix(fmt.Sprint(a), "--fencing-agent-image="); ok {
					check(obj, name, "--fencing-agent-image", v)
				}
			}
		})
	}
	for _, name := range Images {
		if !used[name] {
			t.Errorf("no workload of the release runs image %s", name)
		}
	}
	if kinds := len(r.ofKind("Deployment")) + len(r.ofKind("DaemonSet")); kinds < 5 || workloads < 5 {
		t.Errorf("the release has %d Deployments and DaemonSets with %d containers, want node-manager's five", kinds, workloads)
	}
}

// TestReleaseRunsClusterAPI: node-manager-controller runs with
// --cluster-api and its fencing agents' image pinned; Cluster API's core is
// in the release at the pinned version: every CRD of the pinned module,
// each with the conversion webhook upstream's kustomize patches add,
// pointed at a Service of the release that selects the pods of the
// capi-controller-manager Deployment on the port its webhooks serve, with
// the serving certificate's Secret mounted where it reads it; every
// upstream webhook, pointed at the same Service on upstream's path. Every
// object that needs a CA bundle carries the certificate controller's label.
// Monitoring stays out of it.
func TestReleaseRunsClusterAPI(t *testing.T) {
	o := testOptions(t)
	r := buildRelease(t, o)

	// node-manager-controller.
	nmc := r.find("Deployment", deckhousev1.Namespace, deckhousev1.NodeManagerControllerName)
	if nmc == nil {
		t.Fatalf("the release has no Deployment %s/%s", deckhousev1.Namespace, deckhousev1.NodeManagerControllerName)
	}
	args := convert[appsv1.Deployment](t, nmc).Spec.Template.Spec.Containers[0].Args
	if v, ok := flagValue(args, "--cluster-api"); !ok || (v != "" && v != "true") {
		t.Errorf("node-manager-controller's args %q do not turn --cluster-api on", args)
	}
	pinnedAgent := testRegistry + "/" + deckhousev1.FencingAgentName + "@" + o.Digests[deckhousev1.FencingAgentName]
	if v, _ := flagValue(args, "--fencing-agent-image"); v != pinnedAgent {
		t.Errorf("node-manager-controller's --fencing-agent-image = %q, want the pinned fencing-agent image", v)
	}
	// The DaemonSet policy admits exactly that image from the controller.
	vap := r.find("ValidatingAdmissionPolicy", "", "d8-node-manager-controller-daemonsets")
	if vap == nil {
		t.Fatal("the release has no ValidatingAdmissionPolicy d8-node-manager-controller-daemonsets")
	}
	image := ""
	for _, v := range convert[admissionregistrationv1.ValidatingAdmissionPolicy](t, vap).Spec.Variables {
		if v.Name == "fencingAgentImage" {
			image = v.Expression
		}
	}
	if image != strconv.Quote(pinnedAgent) {
		t.Errorf("the DaemonSet policy's fencingAgentImage is %s, want %q: the controller's DaemonSets would be refused", image, pinnedAgent)
	}

	// capi-controller-manager's Deployment.
	capiObj := r.find("Deployment", deckhousev1.Namespace, infrav1alpha1.CAPIControllerManagerName)
	if capiObj == nil {
		t.Fatalf("the release has no Deployment %s/%s", deckhousev1.Namespace, infrav1alpha1.CAPIControllerManagerName)
	}
	capi := convert[appsv1.Deployment](t, capiObj)
	pod := capi.Spec.Template.Spec
	if pod.ServiceAccountName != infrav1alpha1.CAPIControllerManagerName {
		t.Errorf("capi-controller-manager runs as ServiceAccount %q, want %q (the identity of manifests/capi-controller-manager/rbac.yaml)", pod.ServiceAccountName, infrav1alpha1.CAPIControllerManagerName)
	}
	c := pod.Containers[0]
	portFlag, _ := flagValue(c.Args, "--webhook-port")
	webhookPort, err := strconv.Atoi(portFlag)
	if err != nil {
		t.Fatalf("capi-controller-manager's args %q set no --webhook-port", c.Args)
	}
	certDir, _ := flagValue(c.Args, "--webhook-cert-dir")
	var certSecret string
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == filepath.Clean(certDir) {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					certSecret = v.Secret.SecretName
				}
			}
		}
	}
	if certSecret == "" {
		t.Errorf("capi-controller-manager mounts no Secret at its --webhook-cert-dir %q", certDir)
	}

	// Cluster API's CRDs.
	module := o.ClusterAPIModule
	upstreamCRDs, err := controlplane.ReadManifests(filepath.Join(module, "core", "config", "crd", "bases"))
	if err != nil || len(upstreamCRDs) == 0 {
		t.Fatalf("reading the pinned module's CRDs: %v (%d)", err, len(upstreamCRDs))
	}
	var services []string
	for _, u := range upstreamCRDs {
		obj := r.find("CustomResourceDefinition", "", u.GetName())
		if obj == nil {
			t.Errorf("the release lacks Cluster API's CRD %s", u.GetName())
			continue
		}
		crd := convert[apiextensionsv1.CustomResourceDefinition](t, obj)
		conv := crd.Spec.Conversion
		if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil ||
			conv.Webhook.ClientConfig.Service == nil || ptrValue(conv.Webhook.ClientConfig.Service.Path) != "/convert" ||
			!slices.Equal(conv.Webhook.ConversionReviewVersions, []string{"v1"}) {
			t.Errorf("CRD %s: conversion %+v, want upstream's webhook (/convert on a Service, review v1)", crd.Name, conv)
			continue
		}
		s := conv.Webhook.ClientConfig.Service
		services = append(services, s.Namespace+"/"+s.Name+":"+servicePort(s.Port))
		if obj.GetLabels()[injectCABundleLabel] != "true" {
			t.Errorf("CRD %s has a conversion webhook but not the label %s", crd.Name, injectCABundleLabel)
		}
	}

	// Cluster API's webhook configurations.
	upstreamHooks, err := controlplane.ReadManifests(filepath.Join(module, "core", "config", "webhook", "manifests.yaml"))
	if err != nil || len(upstreamHooks) == 0 {
		t.Fatalf("reading the pinned module's webhook configurations: %v (%d)", err, len(upstreamHooks))
	}
	type hook struct{ kind, path, service string }
	released := map[string]hook{}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		for _, obj := range r.ofKind(kind) {
			if obj.GetLabels()[injectCABundleLabel] != "true" {
				t.Errorf("%s %s lacks the label %s", kind, obj.GetName(), injectCABundleLabel)
			}
			for _, w := range webhooks(t, obj) {
				if w.Service == nil {
					t.Errorf("%s %s, webhook %s: no Service", kind, obj.GetName(), w.Name)
					continue
				}
				released[w.Name] = hook{kind, ptrValue(w.Service.Path), w.Service.Namespace + "/" + w.Service.Name + ":" + servicePort(w.Service.Port)}
			}
		}
	}
	upstreamCount := 0
	for _, u := range upstreamHooks {
		for _, w := range webhooks(t, u) {
			upstreamCount++
			got, ok := released[w.Name]
			if !ok || got.kind != u.GetKind() || got.path != ptrValue(w.Service.Path) {
				t.Errorf("Cluster API's %s webhook %s (path %s) is not in the release as it is upstream: %+v", u.GetKind(), w.Name, ptrValue(w.Service.Path), got)
				continue
			}
			services = append(services, got.service)
		}
	}

	// One Service for all of them, serving capi-controller-manager's webhooks.
	slices.Sort(services)
	services = slices.Compact(services)
	if len(services) != 1 {
		t.Fatalf("Cluster API's conversion and admission webhooks point at %v, want one Service", services)
	}
	nsName, port, _ := strings.Cut(services[0], ":")
	ns, name, _ := strings.Cut(nsName, "/")
	svcObj := r.find("Service", ns, name)
	if svcObj == nil {
		t.Fatalf("the webhooks' Service %s is not in the release", nsName)
	}
	svc := convert[corev1.Service](t, svcObj)
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(capi.Spec.Template.Labels)) || capi.Namespace != svc.Namespace {
		t.Errorf("Service %s selects %v, not capi-controller-manager's pods (%v)", nsName, svc.Spec.Selector, capi.Spec.Template.Labels)
	}
	served := false
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) != port {
			continue
		}
		for _, cp := range c.Ports {
			if int(cp.ContainerPort) == webhookPort && (p.TargetPort.String() == cp.Name || p.TargetPort.IntValue() == webhookPort) {
				served = true
			}
		}
	}
	if !served {
		t.Errorf("Service %s port %s does not reach capi-controller-manager's --webhook-port %d", nsName, port, webhookPort)
	}
	t.Logf("Cluster API: %d CRDs and %d webhooks on Service %s, serving certificate from Secret %s", len(upstreamCRDs), upstreamCount, services[0], certSecret)

	// The aggregated API needs its CA bundle too.
	apiServices := r.ofKind("APIService")
	if len(apiServices) == 0 {
		t.Error("the release has no APIService")
	}
	for _, a := range apiServices {
		if a.GetLabels()[injectCABundleLabel] != "true" {
			t.Errorf("APIService %s lacks the label %s", a.GetName(), injectCABundleLabel)
		}
	}

	// Monitoring is the second artefact.
	for _, kind := range []string{"PrometheusRule", "ServiceMonitor", "PodMonitor"} {
		if n := len(r.ofKind(kind)); n > 0 {
			t.Errorf("the release has %d %s objects; monitoring is the optional artefact", n, kind)
		}
	}
	mon, err := BuildMonitoring(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mon, func(o *unstructured.Unstructured) bool { return o.GetKind() == "PrometheusRule" }) {
		t.Error("the monitoring artefact has no PrometheusRule")
	}

}

// TestClusterAutoscalerIsAnOptionalArtefact: the cluster-autoscaler is
// not in the release but a third artefact: upstream's image pinned by
// digest, finding node-manager's MachineDeployments and the priority
// expander's ConfigMap where node-manager-controller writes them, allowed
// to scale them there only and to touch no Cluster API object elsewhere.
func TestClusterAutoscalerIsAnOptionalArtefact(t *testing.T) {
	o := testOptions(t)
	if r := buildRelease(t, o); r.find("Deployment", deckhousev1.Namespace, "cluster-autoscaler") != nil {
		t.Error("the release holds the cluster-autoscaler; it is the optional artefact")
	}
	ca, err := BuildClusterAutoscaler(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	var scales bool
	for _, obj := range ca {
		switch obj.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
				t.Fatal(err)
			}
			c := d.Spec.Template.Spec.Containers[0]
			if !pinnedRE.MatchString(c.Image) || !strings.HasPrefix(c.Image, "registry.k8s.io/autoscaling/cluster-autoscaler:") {
				t.Errorf("the cluster-autoscaler's image %s is not upstream's pinned by digest", c.Image)
			}
			args = append(c.Command, c.Args...)
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
				t.Fatal(err)
			}
			for _, rule := range r.Rules {
				if r.Namespace == deckhousev1.Namespace && slices.Contains(rule.Resources, "machinedeployments/scale") && slices.Contains(rule.Verbs, "patch") {
					scales = true
				}
			}
		case "ClusterRole":
			for _, rule := range mustRules(t, obj) {
				if slices.ContainsFunc(rule.APIGroups, func(g string) bool { return strings.HasSuffix(g, "cluster.x-k8s.io") }) {
					t.Errorf("ClusterRole %s grants Cluster API rights cluster-wide: %+v", obj.GetName(), rule)
				}
			}
		}
	}
	for _, want := range []string{"--cloud-provider=clusterapi", "--node-group-auto-discovery=clusterapi:namespace=" + deckhousev1.Namespace,
		"--namespace=" + deckhousev1.Namespace, "--expander=priority,least-waste"} {
		if !slices.Contains(args, want) {
			t.Errorf("the cluster-autoscaler's arguments %v lack %s", args, want)
		}
	}
	if !scales {
		t.Errorf("the cluster-autoscaler may not patch machinedeployments/scale in %s", deckhousev1.Namespace)
	}
}

func mustRules(t *testing.T, obj *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var r rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
		t.Fatal(err)
	}
	return r.Rules
}

// servicePort is a webhook's Service port, 443 when unset (the API's default).
func servicePort(p *int32) string {
	if p == nil {
		return "443"
	}
	return strconv.Itoa(int(*p))
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// webhook is what the test compares of an admission webhook.
type webhook struct {
	Name    string
	Service *admissionregistrationv1.ServiceReference
}

func webhooks(t *testing.T, obj *unstructured.Unstructured) []webhook {
	t.Helper()
	var out []webhook
	switch obj.GetKind() {
	case "MutatingWebhookConfiguration":
		for _, w := range convert[admissionregistrationv1.MutatingWebhookConfiguration](t, obj).Webhooks {
			out = append(out, webhook{w.Name, w.ClientConfig.Service})
		}
	case "ValidatingWebhookConfiguration":
		for _, w := range convert[admissionregistrationv1.ValidatingWebhookConfiguration](t, obj).Webhooks {
			out = append(out, webhook{w.Name, w.ClientConfig.Service})
		}
	}
	return out
}

// TestPinRefusesWhatItCannotPin: an image the digests do not list, an
// image named by a tag, and an image flag without a digest each fail the
// release, all reported at once; a registry that is not one is refused.
func TestPinRefusesWhatItCannotPin(t *testing.T) {
	digests := map[string]string{deckhousev1.EarlyOOMName: "sha256:" + strings.Repeat("a", 64)}
	pod := func(name string, containers ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet",
			"metadata": map[string]any{"name": name, "namespace": "ns"},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": containers}}}}}
	}
	container := func(name, image string, args ...any) map[string]any {
		return map[string]any{"name": name, "image": image, "args": args}
	}
	ok := pod("ok", container("a", deckhousev1.EarlyOOMName, "--fencing-agent-image="+deckhousev1.EarlyOOMName),
		container("pinned", "registry.example/other@sha256:"+strings.Repeat("b", 64)))
	if err := Pin([]*unstructured.Unstructured{ok}, testRegistry, digests); err != nil {
		t.Fatalf("pinning images the digests list: %v", err)
	}
	spec := ok.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	want := testRegistry + "/" + deckhousev1.EarlyOOMName + "@" + digests[deckhousev1.EarlyOOMName]
	if c["image"] != want || c["args"].([]any)[0] != "--fencing-agent-image="+want {
		t.Errorf("pinned container = %v, want image and flag %s", c, want)
	}

	bad := pod("bad", container("unknown", "not-built"), container("tagged", "nginx:1.27"),
		container("flag", deckhousev1.EarlyOOMName, "--fencing-agent-image=missing"))
	err := Pin([]*unstructured.Unstructured{bad}, testRegistry, digests)
	if err == nil {
		t.Fatal("images without digests were pinned")
	}
	for _, want := range []string{`container unknown: image "not-built" has no digest`, `container tagged: image "nginx:1.27" is not pinned by digest`,
		`container flag: flag --fencing-agent-image "missing" has no digest`, "DaemonSet ns/bad"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	for _, registry := range []string{"", "https://registry.example/nm", "registry.example/nm/", "registry.example/nm:v1", "registry.example/NM"} {
		if err := checkRegistry(registry); err == nil {
			t.Errorf("registry %q was accepted", registry)
		}
	}
	for _, registry := range []string{"registry.example", "localhost:5000/node-manager", "registry.example/deckhouse/node-manager"} {
		if err := checkRegistry(registry); err != nil {
			t.Errorf("registry %q: %v", registry, err)
		}
	}
}

// TestReadDigests reads make images' format and refuses anything else.
func TestReadDigests(t *testing.T) {
	path := fakeDigests(t)
	d, err := ReadDigests(path)
	if err != nil || len(d) != len(Images) {
		t.Fatalf("ReadDigests = %v, %v; want the %d images", d, err, len(Images))
	}
	for _, bad := range []string{"", "early-oom sha256:abc\n", "early-oom\n", "early-oom sha512:" + strings.Repeat("a", 64) + "\n",
		"early-oom sha256:" + strings.Repeat("a", 64) + "\nearly-oom sha256:" + strings.Repeat("b", 64) + "\n"} {
		p := filepath.Join(t.TempDir(), "digests")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadDigests(p); err == nil {
			t.Errorf("ReadDigests accepted %q", bad)
		}
	}
}

// TestReleaseConvertsDeckhouseVersions: the conversion webhook the
// deckhouse.io CRDs name (apiserver/conversion.CRDConversion) reaches
// bashible-apiserver: a Service of the release on that port selects the
// bashible-apiserver Deployment's pods and targets its secure port; every
// deckhouse.io CRD served at several versions carries it and the
// certificate controller's label, and the certificate controller may patch
// it (its caBundle).
func TestReleaseConvertsDeckhouseVersions(t *testing.T) {
	r := buildRelease(t, testOptions(t))
	want := conversion.CRDConversion()
	ref := want.Webhook.ClientConfig.Service
	svcObj := r.find("Service", ref.Namespace, ref.Name)
	if svcObj == nil {
		t.Fatalf("the conversion webhook's Service %s/%s is not in the release", ref.Namespace, ref.Name)
	}
	svc := convert[corev1.Service](t, svcObj)
	deployObj := r.find("Deployment", ref.Namespace, deckhousev1.BashibleAPIServerName)
	if deployObj == nil {
		t.Fatalf("the release has no Deployment %s/%s", ref.Namespace, deckhousev1.BashibleAPIServerName)
	}
	deploy := convert[appsv1.Deployment](t, deployObj)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(deploy.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s selects %v, not bashible-apiserver's pods (%v)", svc.Name, svc.Spec.Selector, deploy.Spec.Template.Labels)
	}
	c := deploy.Spec.Template.Spec.Containers[0]
	securePort, _ := flagValue(c.Args, "--secure-port")
	reached := false
	for _, p := range svc.Spec.Ports {
		if p.Port != *ref.Port {
			continue
		}
		for _, cp := range c.Ports {
			if strconv.Itoa(int(cp.ContainerPort)) == securePort && (p.TargetPort.String() == cp.Name || p.TargetPort.IntValue() == int(cp.ContainerPort)) {
				reached = true
			}
		}
	}
	if !reached {
		t.Errorf("Service %s port %d does not reach bashible-apiserver's --secure-port %s", svc.Name, *ref.Port, securePort)
	}

	var role *rbacv1.ClusterRole
	for _, o := range r.ofKind("ClusterRole") {
		if o.GetName() == "d8:node-manager:node-manager-controller:certificates" {
			role = convert[rbacv1.ClusterRole](t, o)
		}
	}
	if role == nil {
		t.Fatal("the release has no ClusterRole d8:node-manager:node-manager-controller:certificates")
	}
	mayPatch := func(name string) bool {
		for _, rule := range role.Rules {
			if slices.Contains(rule.APIGroups, "apiextensions.k8s.io") && slices.Contains(rule.Resources, "customresourcedefinitions") &&
				slices.Contains(rule.Verbs, "patch") && (len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, name)) {
				return true
			}
		}
		return false
	}
	converting := 0
	for _, obj := range r.ofKind("CustomResourceDefinition") {
		crd := convert[apiextensionsv1.CustomResourceDefinition](t, obj)
		if crd.Spec.Group != deckhousev1.GroupName || len(crd.Spec.Versions) < 2 {
			continue
		}
		converting++
		if !reflect.DeepEqual(crd.Spec.Conversion, want) {
			t.Errorf("CRD %s serves %d versions with conversion %+v, want bashible-apiserver's webhook %+v", crd.Name, len(crd.Spec.Versions), crd.Spec.Conversion, want)
		}
		if obj.GetLabels()[injectCABundleLabel] != "true" {
			t.Errorf("CRD %s has a conversion webhook but not the label %s", crd.Name, injectCABundleLabel)
		}
		if !mayPatch(crd.Name) {
			t.Errorf("CRD %s: the certificate controller may not patch it to write its caBundle", crd.Name)
		}
	}
	t.Logf("%d deckhouse.io CRDs convert through Service %s/%s:%d%s", converting, ref.Namespace, ref.Name, *ref.Port, *ref.Path)
}
