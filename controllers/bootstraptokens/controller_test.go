package bootstraptokens

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

func sortTokens(ts []Token) {
	slices.SortFunc(ts, func(a, b Token) int { return a.Expires.Compare(b.Expires) })
}

func TestFirstTokenAndManualSecret(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	h.sync("worker")

	toks := h.tokens("worker")
	if len(toks) != 1 {
		t.Fatalf("want one token, got %d", len(toks))
	}
	tok := toks[0]
	if want := t0.Add(TokenTTL); !tok.Expires.Equal(want) {
		t.Errorf("token expires %s, want %s", tok.Expires, want)
	}
	s, err := h.kube.CoreV1().Secrets(metav1.NamespaceSystem).Get(h.ctx, tok.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "true",
		// kube-apiserver authenticates the token with its node group, so
		// bashible-apiserver and the CSR approver need no Secret to know it.
		"auth-extra-groups": "system:bootstrappers:d8-node-manager,system:bootstrappers:d8-node-manager:worker",
		"expiration":        t0.Add(TokenTTL).Format(time.RFC3339),
	} {
		if got := string(s.Data[k]); got != want {
			t.Errorf("token Secret %s = %q, want %q", k, got, want)
		}
	}
	if s.Type != corev1.SecretTypeBootstrapToken || s.Labels[deckhousev1.TokenNodeGroupLabel] != "worker" || s.Labels[deckhousev1.HeritageLabel] != deckhousev1.HeritageNodeManager {
		t.Errorf("token Secret type %q labels %v", s.Type, s.Labels)
	}

	evs := h.drainEvents()
	if len(evs) != 1 || !strings.Contains(evs[0], "BootstrapTokenIssued") || !strings.Contains(evs[0], tok.ID) {
		t.Errorf("want one BootstrapTokenIssued event naming %s, got %q", tok.ID, evs)
	}
	for _, e := range evs {
		if strings.Contains(e, tok.Secret) {
			t.Errorf("an event shows the token secret: %q", e)
		}
	}

	m := h.manualSecret("worker")
	if m == nil {
		t.Fatal("no manual-bootstrap Secret")
	}
	if got := m.Annotations[deckhousev1.TokenExpiresAtAnnotation]; got != t0.Add(TokenTTL).Format(time.RFC3339) {
		t.Errorf("expiry annotation %q", got)
	}
	if m.Annotations[deckhousev1.TokenIDAnnotation] != tok.ID {
		t.Errorf("token-id annotation %q, want %q", m.Annotations[deckhousev1.TokenIDAnnotation], tok.ID)
	}
	sh := string(m.Data[deckhousev1.ManualBootstrapScriptKey])
	for _, want := range []string{tok.String(), "valid until " + t0.Add(TokenTTL).Format(time.RFC3339), "BEGIN CERTIFICATE",
		"'10.0.0.1:6443 10.0.0.2:6443'", "/apis/bashible.deckhouse.io/v1alpha1/bootstrap/$NODE_GROUP", "NODE_GROUP='worker'"} {
		if !strings.Contains(sh, want) {
			t.Errorf("bootstrap.sh lacks %q", want)
		}
	}
	var endpoints []string
	if err := yaml.UnmarshalStrict(m.Data[deckhousev1.ManualBootstrapEndpointsKey], &endpoints); err != nil || !slices.Equal(endpoints, []string{"10.0.0.1:6443", "10.0.0.2:6443"}) {
		t.Errorf("apiserverEndpoints %q (%v)", m.Data[deckhousev1.ManualBootstrapEndpointsKey], err)
	}
	if got := decodedCloudConfigScript(t, string(m.Data[deckhousev1.ManualBootstrapCloudConfigKey])); got != sh {
		t.Error("cloud-config's script is not bootstrap.sh")
	}

	// The group is looked at again when the token reaches its rotation point.
	if at, ok := h.c.pending("worker"); !ok || !at.Equal(t0.Add(TokenTTL-MinValidity)) {
		t.Errorf("next wakeup %s (%v), want %s", at, ok, t0.Add(TokenTTL-MinValidity))
	}
}

func TestReuseWhileMoreThanMinValidityRemains(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	h.sync("worker")
	first := h.tokens("worker")
	secretWrites := h.writes(deckhousev1.Namespace)

	h.clock.Step(TokenTTL - MinValidity - time.Second) // 3h0m1s remain
	h.sync("worker")
	h.sync("worker")

	if got := h.tokens("worker"); len(got) != 1 || got[0] != first[0] {
		t.Fatalf("tokens changed while more than 3 h remained: %v -> %v", first, got)
	}
	if n := h.writes(deckhousev1.Namespace); n != secretWrites {
		t.Errorf("the manual-bootstrap Secret was written %d more times though nothing changed", n-secretWrites)
	}
	if n := h.writes(metav1.NamespaceSystem); n != 1 {
		t.Errorf("%d token writes, want the one create", n)
	}
}

func TestRotationAtMinValidityAndSecretFollows(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeCloudStatic))
	h.sync("worker")
	old := h.tokens("worker")[0]

	h.clock.Step(TokenTTL - MinValidity) // exactly 3 h remain: not more than 3 h
	h.sync("worker")
	toks := h.tokens("worker")
	if len(toks) != 2 || toks[0] != old {
		t.Fatalf("want the old token and a new one, got %v", toks)
	}
	fresh := toks[1]
	if want := t0.Add(TokenTTL - MinValidity + TokenTTL); !fresh.Expires.Equal(want) {
		t.Errorf("new token expires %s, want %s", fresh.Expires, want)
	}
	m := h.manualSecret("worker")
	if m.Annotations[deckhousev1.TokenIDAnnotation] != fresh.ID || !strings.Contains(string(m.Data[deckhousev1.ManualBootstrapScriptKey]), fresh.String()) ||
		strings.Contains(string(m.Data[deckhousev1.ManualBootstrapScriptKey]), old.String()) {
		t.Errorf("the manual-bootstrap Secret did not follow the rotation (token-id %s, want %s)", m.Annotations[deckhousev1.TokenIDAnnotation], fresh.ID)
	}
	if m.Annotations[deckhousev1.TokenExpiresAtAnnotation] != fresh.Expires.Format(time.RFC3339) {
		t.Errorf("expiry annotation %s, want %s", m.Annotations[deckhousev1.TokenExpiresAtAnnotation], fresh.Expires.Format(time.RFC3339))
	}
	// Next: the new token's rotation point (t0+2h) comes before the old
	// token's expiry (t0+4h).
	if at, _ := h.c.pending("worker"); !at.Equal(fresh.Expires.Add(-MinValidity)) {
		t.Errorf("next wakeup %s, want the new token's rotation point %s", at, fresh.Expires.Add(-MinValidity))
	}
}

func TestExpiredTokensAreDeleted(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	expired := h.putToken("worker", t0.Add(-time.Minute))
	atNow := h.putToken("worker", t0) // expires this instant
	valid := h.putToken("worker", t0.Add(3*time.Hour+30*time.Minute))
	// Not ours: an unlabelled bootstrap token and another group's token.
	foreign, _ := newToken(t0.Add(-time.Hour), 0)
	foreignSecret := foreign.secret("worker")
	foreignSecret.Labels = nil
	if _, err := h.kube.CoreV1().Secrets(metav1.NamespaceSystem).Create(h.ctx, foreignSecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("worker")

	toks := h.tokens("worker")
	if len(toks) != 1 || toks[0] != valid {
		t.Fatalf("want only the valid token %s, got %v (expired %s, %s)", valid.ID, toks, expired.ID, atNow.ID)
	}
	if _, err := h.kube.CoreV1().Secrets(metav1.NamespaceSystem).Get(h.ctx, foreign.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("an unlabelled token was touched: %v", err)
	}
	if evs := h.drainEvents(); len(evs) != 0 {
		t.Errorf("a token with 3h30m left was replaced: %q", evs)
	}
	if m := h.manualSecret("worker"); m == nil || m.Annotations[deckhousev1.TokenIDAnnotation] != valid.ID {
		t.Errorf("the manual-bootstrap Secret does not use the existing valid token")
	}
}

func TestTokenWithoutItsGroupsOwnExtraGroupIsReplacedAtOnce(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	old, _ := newToken(t0, TokenTTL)
	s := old.secret("worker")
	s.Data["auth-extra-groups"] = []byte(deckhousev1.BootstrappersGroup) // as issued before groups were authenticated
	if _, err := h.kube.CoreV1().Secrets(metav1.NamespaceSystem).Create(h.ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("worker")
	m := h.manualSecret("worker")
	if m == nil || m.Annotations[deckhousev1.TokenIDAnnotation] == old.ID {
		t.Fatalf("the manual-bootstrap Secret still uses token %s, which carries no node group", old.ID)
	}
}

func TestNewestTokenIsCurrent(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	h.putToken("worker", t0.Add(3*time.Hour+10*time.Minute))
	newer := h.putToken("worker", t0.Add(3*time.Hour+50*time.Minute))
	h.sync("worker")
	if m := h.manualSecret("worker"); m.Annotations[deckhousev1.TokenIDAnnotation] != newer.ID {
		t.Errorf("the Secret uses token %s, want the newest %s", m.Annotations[deckhousev1.TokenIDAnnotation], newer.ID)
	}
	if n := len(h.tokens("worker")); n != 2 {
		t.Errorf("%d tokens, want the two valid ones kept", n)
	}
}

func TestDeletedGroupIsCleanedUp(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic), group("keep", deckhousev1.NodeTypeStatic))
	h.sync("worker")
	h.sync("keep")
	orphan := h.putToken("ghost", t0.Add(time.Hour)) // a group that no longer exists

	if err := h.nm.DeckhouseV1().NodeGroups().Delete(h.ctx, "worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("worker")
	h.sync("ghost")

	if toks := h.tokens("worker"); len(toks) != 0 {
		t.Errorf("tokens of the deleted group remain: %v", toks)
	}
	if h.manualSecret("worker") != nil {
		t.Error("the deleted group's manual-bootstrap Secret remains")
	}
	if toks := h.tokens("ghost"); len(toks) != 0 {
		t.Errorf("orphan token %s remains", orphan.ID)
	}
	if _, ok := h.c.pending("worker"); ok {
		t.Error("the deleted group still has a wakeup")
	}
	if len(h.tokens("keep")) != 1 || h.manualSecret("keep") == nil {
		t.Error("another group's token or Secret was removed")
	}
}

// A CloudEphemeral group has a token and, instead of a manual-bootstrap
// Secret, a bootstrap-data Secret in Cluster API's form (format and value,
// the cloud-init user data that runs the manual-bootstrap script), which
// follows the token's rotation; a group that changes type swaps one for
// the other.
func TestCloudEphemeralHasBootstrapDataInsteadOfAManualSecret(t *testing.T) {
	h := newHarness(t, t0, group("cloud", deckhousev1.NodeTypeCloudEphemeral), group("static", deckhousev1.NodeTypeStatic))
	h.sync("cloud")
	toks := h.tokens("cloud")
	if len(toks) != 1 {
		t.Fatalf("a CloudEphemeral group has %d tokens, want 1", len(toks))
	}
	if h.manualSecret("cloud") != nil {
		t.Error("a CloudEphemeral group got a manual-bootstrap Secret")
	}
	data := h.secret(BootstrapDataSecretName("cloud"))
	if data == nil {
		t.Fatalf("no Secret %s for a CloudEphemeral group", BootstrapDataSecretName("cloud"))
	}
	if f := string(data.Data[infrav1alpha1.BootstrapDataFormatKey]); f != deckhousev1.ManualBootstrapCloudConfigKey || len(data.Data) != 2 {
		t.Errorf("bootstrap data: format %q and %d keys, want %s and 2 (value, format)", f, len(data.Data), deckhousev1.ManualBootstrapCloudConfigKey)
	}
	script := decodedCloudConfigScript(t, string(data.Data[infrav1alpha1.ClusterSecretValueKey]))
	if !strings.Contains(script, toks[0].String()) || data.Annotations[deckhousev1.TokenIDAnnotation] != toks[0].ID {
		t.Errorf("the bootstrap data does not carry the group's token %s (annotation %s)", toks[0].ID, data.Annotations[deckhousev1.TokenIDAnnotation])
	}

	// Rotation: the bootstrap data follows the new token.
	h.clock.Step(TokenTTL - MinValidity)
	h.sync("cloud")
	toks = h.tokens("cloud")
	fresh := toks[len(toks)-1]
	if script := decodedCloudConfigScript(t, string(h.secret(BootstrapDataSecretName("cloud")).Data[infrav1alpha1.ClusterSecretValueKey])); len(toks) != 2 ||
		!strings.Contains(script, fresh.String()) || strings.Contains(script, toks[0].String()) {
		t.Errorf("the bootstrap data did not follow the rotation to token %s", fresh.ID)
	}

	// A group that becomes CloudEphemeral swaps its manual-bootstrap
	// Secret for bootstrap data, and back.
	h.sync("static")
	if h.manualSecret("static") == nil {
		t.Fatal("no manual-bootstrap Secret for a Static group")
	}
	setType := func(nodeType deckhousev1.NodeType) {
		t.Helper()
		ng, err := h.nm.DeckhouseV1().NodeGroups().Get(h.ctx, "static", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ng.Spec.NodeType = nodeType
		if _, err := h.nm.DeckhouseV1().NodeGroups().Update(h.ctx, ng, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.sync("static")
	}
	setType(deckhousev1.NodeTypeCloudEphemeral)
	if h.manualSecret("static") != nil || h.secret(BootstrapDataSecretName("static")) == nil {
		t.Error("a group that became CloudEphemeral: want its manual-bootstrap Secret gone and bootstrap data in its place")
	}
	setType(deckhousev1.NodeTypeStatic)
	if h.manualSecret("static") == nil || h.secret(BootstrapDataSecretName("static")) != nil {
		t.Error("a group that became Static again: want its manual-bootstrap Secret back and its bootstrap data gone")
	}
}

// A Secret of the bootstrap-data name that this controller did not write
// for the group (no labels of its own) is not deleted with a Static group's
// sync.
func TestAForeignSecretOfTheOtherNameIsLeftAlone(t *testing.T) {
	h := newHarness(t, t0, group("static", deckhousev1.NodeTypeStatic))
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: BootstrapDataSecretName("static"), Namespace: deckhousev1.Namespace}}
	if _, err := h.kube.CoreV1().Secrets(deckhousev1.Namespace).Create(h.ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("static")
	if h.manualSecret("static") == nil || h.secret(BootstrapDataSecretName("static")) == nil {
		t.Error("want the group's manual-bootstrap Secret written and the foreign Secret left alone")
	}
}

// decodedCloudConfigScript is the script a cloud-config document made by
// CloudConfig writes, failing unless the document writes one script and
// runs it.
func decodedCloudConfigScript(t *testing.T, doc string) string {
	t.Helper()
	if !strings.HasPrefix(doc, "#cloud-config\n") {
		t.Fatalf("cloud-config does not start with #cloud-config: %q", doc)
	}
	var cc cloudConfig
	if err := yaml.UnmarshalStrict([]byte(doc), &cc); err != nil {
		t.Fatalf("cloud-config: %v", err)
	}
	if len(cc.WriteFiles) != 1 || len(cc.RunCmd) != 1 || !slices.Equal(cc.RunCmd[0], []string{"bash", cc.WriteFiles[0].Path}) {
		t.Fatalf("cloud-config does not write one script and run it: %+v", cc)
	}
	b, err := base64.StdEncoding.DecodeString(cc.WriteFiles[0].Content)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSecretRewrittenOnlyWhenContentChanges(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	h.sync("worker")
	before := h.writes(deckhousev1.Namespace)
	h.sync("worker")
	if n := h.writes(deckhousev1.Namespace) - before; n != 0 {
		t.Fatalf("%d writes with nothing changed", n)
	}

	// A foreign annotation is kept and does not cause a rewrite.
	m := h.manualSecret("worker")
	m.Annotations["example.com/note"] = "kept"
	if _, err := h.kube.CoreV1().Secrets(deckhousev1.Namespace).Update(h.ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before = h.writes(deckhousev1.Namespace)
	h.sync("worker")
	if n := h.writes(deckhousev1.Namespace) - before; n != 0 {
		t.Errorf("%d writes after a foreign annotation was added", n)
	}

	// New endpoints: rewritten.
	if _, err := h.kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(h.ctx, endpointSlice("10.0.0.9"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("worker")
	m = h.manualSecret("worker")
	if string(m.Data[deckhousev1.ManualBootstrapEndpointsKey]) != "- 10.0.0.9:6443\n" || !strings.Contains(string(m.Data[deckhousev1.ManualBootstrapScriptKey]), "'10.0.0.9:6443'") {
		t.Errorf("endpoints not followed: %q", m.Data[deckhousev1.ManualBootstrapEndpointsKey])
	}
	if m.Annotations["example.com/note"] != "kept" {
		t.Error("the rewrite dropped a foreign annotation")
	}

	// New CA: rewritten.
	ca := testCA(t)
	if _, err := h.kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(h.ctx, caConfigMapObject(ca), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("worker")
	if !strings.Contains(string(h.manualSecret("worker").Data[deckhousev1.ManualBootstrapScriptKey]), strings.TrimSpace(ca)) {
		t.Error("the new CA is not in bootstrap.sh")
	}

	// A hand-edited script is put back.
	m = h.manualSecret("worker")
	m.Data[deckhousev1.ManualBootstrapScriptKey] = []byte("#!/bin/sh\necho tampered\n")
	if _, err := h.kube.CoreV1().Secrets(deckhousev1.Namespace).Update(h.ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.sync("worker")
	if strings.Contains(string(h.manualSecret("worker").Data[deckhousev1.ManualBootstrapScriptKey]), "tampered") {
		t.Error("an edited bootstrap.sh was not restored")
	}
}

func TestNoSecretWithoutCAOrEndpoints(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	if err := h.kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(h.ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// settle compares the slice too; wait for the delete by hand.
	if err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := h.c.slices.EndpointSlices(metav1.NamespaceDefault).Get("kubernetes")
		return err != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.c.sync(h.ctx, "worker"); err != nil {
		t.Fatal(err)
	}
	if len(h.tokens("worker")) != 1 {
		t.Error("no token issued while the endpoints are unknown")
	}
	if h.manualSecret("worker") != nil {
		t.Error("a manual-bootstrap Secret without API endpoints was written")
	}
}

// The cache may lag behind a token the controller just created; a second
// sync must not issue another one.
func TestNoDuplicateTokenWhenTheCacheLags(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	h.settle()
	// A token cache that never catches up.
	h.c.tokens = corelisters.NewSecretLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	for range 3 {
		if err := h.c.sync(h.ctx, "worker"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.tokens("worker")); n != 1 {
		t.Errorf("%d tokens after back-to-back syncs, want 1", n)
	}
}

// The injected clock drives the controller: stepping it past the rotation
// point issues a new token, the Secret follows, and the old token is
// deleted once expired, all without any other trigger.
func TestClockDrivesRotationAndExpiry(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	go h.c.Run(h.ctx, 1)
	first := h.waitToken("worker", func(ts []Token) bool { return len(ts) == 1 })[0]
	h.waitSecretToken("worker", first)

	h.waitWakeup("worker", first.Expires.Add(-MinValidity))
	h.clock.Step(TokenTTL - MinValidity)
	second := h.waitToken("worker", func(ts []Token) bool { return len(ts) == 2 })[1]
	h.waitSecretToken("worker", second)

	// The next wakeup is the second token's rotation point (t0+2h); step
	// to just past the first token's expiry (t0+4h): by then the first has
	// expired and the second (1 h left) is replaced too.
	h.waitWakeup("worker", second.Expires.Add(-MinValidity))
	h.clock.Step(MinValidity)
	toks := h.waitToken("worker", func(ts []Token) bool { return len(ts) == 2 && ts[0] == second })
	if toks[1].Expires.Before(h.clock.Now().Add(MinValidity)) {
		t.Errorf("current token %s expires %s", toks[1].ID, toks[1].Expires)
	}
	h.waitSecretToken("worker", toks[1])
}

func (h *harness) waitToken(group string, ok func([]Token) bool) []Token {
	h.t.Helper()
	var got []Token
	err := wait.PollUntilContextTimeout(h.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = h.tokens(group)
		return ok(got), nil
	})
	if err != nil {
		h.t.Fatalf("tokens of %s: %v; last %v", group, err, got)
	}
	return got
}

func (h *harness) waitSecretToken(group string, tok Token) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m := h.manualSecret(group)
		return m != nil && m.Annotations[deckhousev1.TokenIDAnnotation] == tok.ID && strings.Contains(string(m.Data[deckhousev1.ManualBootstrapScriptKey]), tok.String()), nil
	})
	if err != nil {
		h.t.Fatalf("manual-bootstrap Secret of %s never used token %s", group, tok.ID)
	}
}

// waitWakeup waits until the controller has a clock timer for group at at.
func (h *harness) waitWakeup(group string, at time.Time) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, ok := h.c.pending(group)
		return ok && got.Equal(at) && h.clock.HasWaiters(), nil
	})
	if err != nil {
		h.t.Fatalf("no wakeup of %s at %s", group, at)
	}
}

// A superseded token that expires before the current one's rotation point
// wakes the group at its expiry, so it is deleted on time.
func TestWakeupAtEarlierExpiry(t *testing.T) {
	h := newHarness(t, t0, group("worker", deckhousev1.NodeTypeStatic))
	old := h.putToken("worker", t0.Add(20*time.Minute))
	h.sync("worker")
	if n := len(h.tokens("worker")); n != 2 {
		t.Fatalf("%d tokens, want the old one and a new one", n)
	}
	if at, _ := h.c.pending("worker"); !at.Equal(old.Expires) {
		t.Errorf("next wakeup %s, want the old token's expiry %s", at, old.Expires)
	}
	h.clock.Step(20 * time.Minute)
	h.sync("worker")
	if toks := h.tokens("worker"); len(toks) != 1 || toks[0].ID == old.ID {
		t.Errorf("after the old token's expiry: %v", toks)
	}
}
