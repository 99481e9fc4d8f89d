package bundles

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/templates"
)

// Credentials planted in every place the context holds one.
const (
	proxyPassword   = "proxy-pass-4711"
	mirrorPassword  = "mirror-pass-4712"
	packagePassword = "package-pass-4713"
	passwordHash    = "$6$saltsalt$4714hashhashhashhashhashhashhashhashhashhashhashhash"
)

var credentialsConfiguration = []byte(`apiVersion: deckhouse.io/v1
kind: ClusterConfiguration
clusterDomain: corp.local
proxy:
  httpProxy: http://proxyuser:` + proxyPassword + `@proxy.corp:3128
packageSource:
  url: https://pkguser:` + packagePassword + `@packages.corp/node
registry:
  mirrors:
  - host: docker.io
    endpoints: [https://mirror.corp]
    username: mirroruser
    password: ` + mirrorPassword + `
`)

// renderContexts renders groups under the credentials configuration and
// returns each group's context.
func renderContexts(t *testing.T, groups []*deckhousev1.NodeGroup, users []*deckhousev1.NodeUser) map[string]*templates.Context {
	t.Helper()
	in := Inputs{NodeGroups: groups, NodeUsers: users, ClusterConfiguration: credentialsConfiguration, Endpoints: []string{"192.0.2.10:6443"}}
	out := map[string]*templates.Context{}
	for g, r := range newRenderer(t).RenderAll(in) {
		if r.Context == nil {
			t.Fatalf("group %s has no context: %v", g, r.Failures)
		}
		out[g] = r.Context
	}
	return out
}

// groupContext is a group's context as input.yaml tells a reader to put it
// together (the rule in its header and in AUTHORING.md).
func groupContext(t *testing.T, doc map[string]any, group string) map[string]any {
	t.Helper()
	rc := doc["renderContext"].(map[string]any)
	out := map[string]any{}
	for k, v := range rc["common"].(map[string]any) {
		out[k] = v
	}
	own, ok := rc["groups"].(map[string]any)[group].(map[string]any)
	if !ok {
		t.Fatalf("renderContext.groups has no entry for %s", group)
	}
	for k, v := range own {
		out[k] = v
	}
	for _, ng := range doc["nodeGroups"].([]any) {
		if ng.(map[string]any)["name"] == group {
			out["nodeGroup"] = ng
		}
	}
	return out
}

func TestContextSecretShowsWhatEachGroupsTemplatesSeeWithoutCredentials(t *testing.T) {
	a := group("a")
	a.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](77)}
	b := group("b")
	b.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Labels: map[string]string{"tier": "db"}}
	users := []*deckhousev1.NodeUser{
		{ObjectMeta: metav1.ObjectMeta{Name: "everywhere"}, Spec: deckhousev1.NodeUserSpec{UID: 1001, PasswordHash: passwordHash, SSHPublicKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ everywhere"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "only-b"}, Spec: deckhousev1.NodeUserSpec{UID: 1002, NodeGroups: []string{"b"}, SSHPublicKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ only-b"}}},
	}
	contexts := renderContexts(t, []*deckhousev1.NodeGroup{a, b}, users)
	raw, omitted, err := contextDocument(contexts, MaxContextBytes)
	if err != nil || len(omitted) != 0 {
		t.Fatalf("contextDocument: omitted %v, %v", omitted, err)
	}
	text := string(raw)
	// The contexts renders use keep their credentials.
	if a := contexts["a"]; a.Registry.Mirrors[0].Auth == "" || a.Registry.Mirrors[0].Auth == templates.Redacted ||
		a.NodeUsers[0].Spec.PasswordHash != passwordHash || !strings.Contains(a.Proxy.HTTPProxy, proxyPassword) {
		t.Errorf("showing the context changed the one templates render from: %+v", a.Registry.Mirrors)
	}
	for _, secret := range []string{proxyPassword, mirrorPassword, packagePassword, passwordHash,
		base64.StdEncoding.EncodeToString([]byte("mirroruser:" + mirrorPassword))} {
		if strings.Contains(text, secret) {
			t.Errorf("input.yaml carries the credential %q", secret)
		}
	}
	for _, shown := range []string{"http://[redacted]@proxy.corp:3128", "https://[redacted]@packages.corp/node/kubernetes", "auth: '[redacted]'", "passwordHash: '[redacted]'"} {
		if !strings.Contains(text, shown) {
			t.Errorf("input.yaml lacks %q (the credential redacted, the rest shown):\n%s", shown, text)
		}
	}

	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("input.yaml is not YAML: %v", err)
	}
	// Deckhouse's keys, with its meaning.
	if doc["clusterDomain"] != "corp.local" || !reflect.DeepEqual(doc["apiserverEndpoints"], []any{"192.0.2.10:6443"}) ||
		doc["proxy"].(map[string]any)["httpProxy"] != "http://[redacted]@proxy.corp:3128" {
		t.Errorf("Deckhouse's cluster-wide keys: clusterDomain %v, apiserverEndpoints %v, proxy %v", doc["clusterDomain"], doc["apiserverEndpoints"], doc["proxy"])
	}
	// Every group's context, put together by the documented rule, is
	// exactly what its templates see, but for the credentials.
	for _, g := range []string{"a", "b"} {
		redacted, err := contexts[g].Redacted()
		if err != nil {
			t.Fatal(err)
		}
		want, err := redacted.Values()
		if err != nil {
			t.Fatal(err)
		}
		if got := groupContext(t, doc, g); !reflect.DeepEqual(got, want) {
			t.Errorf("group %s: the context put together from input.yaml differs from the one its templates see:\ngot  %v\nwant %v", g, got, want)
		}
	}
	// What differs between the groups is per group, the rest common.
	own := doc["renderContext"].(map[string]any)["groups"].(map[string]any)
	if _, ok := own["b"].(map[string]any)["nodeUsers"]; !ok {
		t.Errorf("nodeUsers differ between a and b, yet are not per group: %v", own)
	}
	if _, ok := doc["renderContext"].(map[string]any)["common"].(map[string]any)["registry"]; !ok {
		t.Error("the registry, the same for every group, is not in renderContext.common")
	}
}

// manyGroups are n groups with a typical node template.
func manyGroups(n int) []*deckhousev1.NodeGroup {
	out := make([]*deckhousev1.NodeGroup, n)
	for i := range out {
		g := group(fmt.Sprintf("group-%04d", i))
		g.Spec.NodeTemplate = &deckhousev1.NodeTemplate{
			Labels: map[string]string{"node-role.example.com/" + g.Name: "", "tier": "app", "team": "payments"},
			Taints: []deckhousev1.Taint{{Key: "dedicated", Value: g.Name, Effect: "NoSchedule"}},
		}
		out[i] = g
	}
	return out
}

func TestContextSecretStaysWithinItsLimitWithThousandsOfGroups(t *testing.T) {
	// Contexts as the renderer builds them (rendering 1,000 bundles would
	// only make the test slow).
	settings, err := templates.ParseClusterConfiguration(credentialsConfiguration)
	if err != nil {
		t.Fatal(err)
	}
	contexts := map[string]*templates.Context{}
	for _, ng := range manyGroups(1000) {
		c, err := templates.NewContext(ng, settings, []string{"192.0.2.10:6443"}, "")
		if err != nil {
			t.Fatal(err)
		}
		contexts[ng.Name] = &c
	}
	full, omitted, err := contextDocument(contexts, 1<<30)
	if err != nil || len(omitted) != 0 {
		t.Fatalf("unbounded: omitted %d, %v", len(omitted), err)
	}
	t.Logf("1000 groups with three labels and a taint: input.yaml is %d bytes (%d a group)", len(full), len(full)/1000)
	if len(full) <= MaxContextBytes {
		t.Fatalf("1000 such groups fit in %d bytes: the rest of the test would prove nothing", MaxContextBytes)
	}

	// Bounded (on 300 of them, for speed): the groups in name order while
	// they fit, the rest named.
	some := map[string]*templates.Context{}
	for name, c := range contexts {
		if name < "group-0300" {
			some[name] = c
		}
	}
	contexts = some
	full, _, err = contextDocument(contexts, 1<<30)
	if err != nil {
		t.Fatal(err)
	}

	// Bounded: the groups in name order while they fit, the rest named.
	limit := len(full) / 3
	doc, omitted, err := contextDocument(contexts, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc) > limit || len(omitted) == 0 {
		t.Fatalf("limit %d: %d bytes, %d groups omitted", limit, len(doc), len(omitted))
	}
	again, _, _ := contextDocument(contexts, limit)
	if !bytes.Equal(doc, again) {
		t.Error("the bounded document differs between two runs: leaders would rewrite it")
	}
	var parsed struct {
		NodeGroups []struct {
			Name string `json:"name"`
		} `json:"nodeGroups"`
		NodeGroupsOmitted []string `json:"nodeGroupsOmitted"`
	}
	if err := yaml.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ng := range parsed.NodeGroups {
		names = append(names, ng.Name)
	}
	all := append(slices.Clone(names), parsed.NodeGroupsOmitted...)
	if len(all) != 300 || !slices.IsSorted(all) || !slices.Equal(parsed.NodeGroupsOmitted, omitted) {
		t.Errorf("%d groups shown and %d omitted: want all 300, shown ones first in name order", len(names), len(parsed.NodeGroupsOmitted))
	}
	// One more group would not have fitted.
	if bigger, _ := encodeContextsForTest(t, contexts, len(names)+1); len(bigger) <= limit {
		t.Errorf("%d groups are shown, but %d fit in %d bytes", len(names), len(names)+1, limit)
	}
}

func encodeContextsForTest(t *testing.T, contexts map[string]*templates.Context, n int) ([]byte, error) {
	t.Helper()
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range contexts {
			if !yield(k) {
				return
			}
		}
	})
	values := map[string]map[string]any{}
	for _, name := range names {
		r, err := contexts[name].Redacted()
		if err != nil {
			t.Fatal(err)
		}
		if values[name], err = r.Values(); err != nil {
			t.Fatal(err)
		}
	}
	return encodeContexts(names[:n], names[n:], values, commonKeys(names, values))
}

// contextWrites counts the leader's writes of the context Secret.
func contextWrites(kube *kubefake.Clientset) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.GetNamespace() != deckhousev1.Namespace || a.GetResource().Resource != "secrets" {
			continue
		}
		// CreateAction and UpdateAction are the same interface.
		if w, ok := a.(k8stesting.CreateAction); ok && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			if s, ok := w.GetObject().(*corev1.Secret); ok && s.Name == deckhousev1.ContextSecret {
				n++
			}
		}
	}
	return n
}

func waitContext(t *testing.T, kube *kubefake.Clientset, what string, ok func(string) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ContextSecret, metav1.GetOptions{})
		return err == nil && ok(string(s.Data[deckhousev1.ContextSecretKey])), nil
	})
	if err != nil {
		t.Fatalf("the context Secret never showed %s", what)
	}
}

func TestLeaderWritesTheContextSecretOnlyWhenAContextChanges(t *testing.T) {
	r := runController(t, 10*time.Second, []string{"a", "b"}, config("step.sh", []string{"a"}, "echo one"))
	ctx := context.Background()
	waitContext(t, r.kube, "both groups", func(s string) bool { return strings.Contains(s, "name: a\n") && strings.Contains(s, "name: b\n") })
	secret, err := r.kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ContextSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Labels[deckhousev1.PublishedBundleAppLabel] != deckhousev1.BashibleAPIServerName || secret.Type != corev1.SecretTypeOpaque {
		t.Errorf("the context Secret: labels %v, type %s", secret.Labels, secret.Type)
	}

	// A change of a step changes a bundle, not a context: no write.
	before := publishedChecksum(ctx, r.kube, "a")
	ngc, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, "step.sh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ngc.Spec.Content = "echo two"
	if _, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, ngc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, r.kube, "a", time.Minute, func(sum string) bool { return sum != "" && sum != before })

	// A change of a context is written. Publishing is sequential, so once
	// it shows, the publish of the step's change is long done.
	ng, err := r.nm.DeckhouseV1().NodeGroups().Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ng.Spec.Kubelet = &deckhousev1.KubeletSpec{MaxPods: ptr.To[int32](42)}
	if _, err := r.nm.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitContext(t, r.kube, "maxPods 42", func(s string) bool { return strings.Contains(s, "maxPods: 42") })
	if n := contextWrites(r.kube); n != 2 {
		t.Errorf("the context Secret was written %d times, want 2: once at start and once for the NodeGroup's change, never for a step's", n)
	}

	// Someone's edit is overwritten.
	secret, err = r.kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.ContextSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[deckhousev1.ContextSecretKey] = []byte("edited: true\n")
	if _, err := r.kube.CoreV1().Secrets(deckhousev1.Namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitContext(t, r.kube, "the leader's content again", func(s string) bool { return strings.Contains(s, "maxPods: 42") })
}
