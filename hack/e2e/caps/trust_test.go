package caps

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	"github.com/node-manager/node-manager/controllers/caps/hostssh"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// warnings collects the warnings kube-apiserver answers with.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := strings.Join(w.list, "\n")
	w.list = nil
	return out
}

// clientAs is a client acting as user (impersonated by the admin), with
// the warnings it receives.
func clientAs(t *testing.T, user string, groups ...string) (versioned.Interface, *warnings) {
	t.Helper()
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	}
	w := &warnings{}
	cfg.WarningHandler = w
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// grant gives user the rules, cluster-wide (namespace "") or in namespace,
// and waits until the authorizer says so for the first rule.
func grant(t *testing.T, user, namespace string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := framework.Context(t)
	name := fmt.Sprintf("e2e-%s-%s-%d", user, strings.Join(rules[0].Verbs, "-"), len(rules[0].ResourceNames))
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	rbac := f.Kube.RbacV1()
	if namespace == "" {
		if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		bindClusterRole(t, user, name)
	} else {
		if _, err := rbac.Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.Roles(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}) })
		if _, err := rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.RoleBindings(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	r := rules[0]
	resourceName := ""
	if len(r.ResourceNames) > 0 {
		resourceName = r.ResourceNames[0]
	}
	waitAllowed(t, user, namespace, r.APIGroups[0], r.Resources[0], r.Verbs[0], resourceName)
}

// bindClusterRole binds the ClusterRole role to user, and removes the
// binding at the end of the test.
func bindClusterRole(t *testing.T, user, role string) {
	t.Helper()
	name := "e2e-" + user + "-" + strings.ReplaceAll(role, ":", "-")
	bindings := f.Kube.RbacV1().ClusterRoleBindings()
	if _, err := bindings.Create(framework.Context(t), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bindings.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// waitAllowed waits until kube-apiserver's authorizer lets user verb the
// resource (RBAC follows its objects through an informer).
func waitAllowed(t *testing.T, user, namespace, group, resource, verb, name string) {
	t.Helper()
	framework.Poll(t, fmt.Sprintf("%s allowed to %s %s %s", user, verb, resource, name), func(ctx context.Context) (bool, error) {
		review, err := f.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar(user, namespace, group, resource, verb, name), metav1.CreateOptions{})
		return err == nil && review.Status.Allowed, nil
	})
}

// trustInstance is a StaticInstance of the policy tests: an address no
// test host has, credentials named creds, annotations as given.
func trustInstance(name, creds string, annotations map[string]string) *deckhousev1alpha2.StaticInstance {
	inst := newInstance(name, "192.0.2.200")
	inst.Spec.CredentialsRef.Name = creds
	inst.Annotations = annotations
	return inst
}

// mustRefuse fails unless err is a refusal saying want.
func mustRefuse(t *testing.T, what string, err error, want string) {
	t.Helper()
	refused(t, what, err, want)
}

// TestStaticInstanceTrustIsAdmins (issue 35, item 5): a user allowed only
// to create (and edit) StaticInstances may not name SSHCredentials it may
// not use, nor set, change or remove a host's pinned key or the leave to
// trust it on first use; with use granted for some credentials it may name
// those, and with the ClusterRole d8:node-manager:static-host-keys it may
// pin keys. An admin may allow trust on first use. caps-controller-manager
// may pin the key it saw on an instance whose key was left to trust on
// first use, and change nothing else.
func TestStaticInstanceTrustIsAdmins(t *testing.T) {
	ctx := framework.Context(t)
	const user = "e2e-static-delegate"
	testCredentials(t, "trust-allowed", deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64([]byte("a key"))})
	testCredentials(t, "trust-forbidden", deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64([]byte("a key"))})
	grant(t, user, "", rbacv1.PolicyRule{APIGroups: []string{deckhousev1alpha2.GroupName}, Resources: []string{"staticinstances"},
		Verbs: []string{"create", "get", "update", "patch", "delete"}})
	delegate, _ := clientAs(t, user)
	as := delegate.DeckhouseV1alpha2().StaticInstances()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	// Credentials it may not use: refused (once the policy is loaded: a
	// dry run, until kube-apiserver refuses it).
	var err error
	framework.Poll(t, "a StaticInstance naming credentials its author may not use refused", func(ctx context.Context) (bool, error) {
		_, err = as.Create(ctx, trustInstance("trust-probe", "trust-forbidden", nil), dry)
		return err != nil, nil
	})
	mustRefuse(t, "a StaticInstance naming credentials its author may not use", err, "may not use SSHCredentials trust-forbidden")

	// use granted for trust-allowed only.
	grant(t, user, "", rbacv1.PolicyRule{APIGroups: []string{deckhousev1alpha2.GroupName}, Resources: []string{"sshcredentials"},
		Verbs: []string{deckhousev1.UseVerb}, ResourceNames: []string{"trust-allowed"}})
	if _, err := as.Create(ctx, trustInstance("trust-forbidden-still", "trust-forbidden", nil), dry); err == nil {
		t.Fatal("use of trust-allowed let the user name trust-forbidden")
	}
	inst, err := as.Create(ctx, trustInstance("trust-delegated", "trust-allowed", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a StaticInstance naming credentials its author may use: %v", err)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha2().StaticInstances().Delete(context.Background(), inst.Name, metav1.DeleteOptions{})
	})
	// Switching to credentials it may not use: refused too.
	_, err = as.Patch(ctx, inst.Name, types.MergePatchType, []byte(`{"spec":{"credentialsRef":{"name":"trust-forbidden"}}}`), metav1.PatchOptions{})
	mustRefuse(t, "switching a StaticInstance to credentials its author may not use", err, "may not use SSHCredentials trust-forbidden")

	// The host key annotations are an admin's.
	hostKey := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	annotate := func(c versioned.Interface, key, value string) error {
		v := "null"
		if value != "" {
			v = strconv.Quote(value)
		}
		_, err := c.DeckhouseV1alpha2().StaticInstances().Patch(ctx, inst.Name, types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%s}}}`, key, v), metav1.PatchOptions{})
		return err
	}
	mustRefuse(t, "a delegate pinning a host key", annotate(delegate, deckhousev1.SSHHostKeyAnnotation, hostKey), "may not set, change or remove it")
	mustRefuse(t, "a delegate allowing trust on first use", annotate(delegate, deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation, "true"), "may not set, change or remove it")
	_, err = as.Create(ctx, trustInstance("trust-tofu-on-create", "trust-allowed", map[string]string{deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation: "true"}), dry)
	mustRefuse(t, "a delegate creating an instance trusted on first use", err, "may not set, change or remove it")

	// An admin allows trust on first use; caps-controller-manager pins
	// the key it saw, once, and may not change it nor the leave.
	if err := annotate(f.NM, deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation, "true"); err != nil {
		t.Fatalf("an admin allowing trust on first use: %v", err)
	}
	caps, _ := clientAs(t, stack.CAPSUser, "system:serviceaccounts", "system:serviceaccounts:"+deckhousev1.Namespace)
	if err := annotate(caps, deckhousev1.SSHHostKeyAnnotation, hostKey); err != nil {
		t.Fatalf("caps-controller-manager pinning the key seen on first use: %v", err)
	}
	mustRefuse(t, "caps-controller-manager changing a pinned key", annotate(caps, deckhousev1.SSHHostKeyAnnotation, strings.Replace(hostKey, "BBBB", "CCCC", 1)), "may not set, change or remove it")
	mustRefuse(t, "caps-controller-manager removing the leave to trust on first use", annotate(caps, deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation, ""), "may not set, change or remove it")
	mustRefuse(t, "a delegate removing a pinned key", annotate(delegate, deckhousev1.SSHHostKeyAnnotation, ""), "may not set, change or remove it")

	// The shipped role lets a delegate pin keys.
	bindClusterRole(t, user, deckhousev1.StaticHostKeysRole)
	waitAllowed(t, user, "", deckhousev1alpha2.GroupName, "staticinstances", deckhousev1.TrustHostKeyVerb, inst.Name)
	if err := annotate(delegate, deckhousev1.SSHHostKeyAnnotation, strings.Replace(hostKey, "BBBB", "DDDD", 1)); err != nil {
		t.Errorf("a delegate with %s pinning a key: %v", deckhousev1.StaticHostKeysRole, err)
	}
}

// TestSSHCredentialsSecretsAndWarnings (issue 35, item 14): SSHCredentials
// may name a Secret of d8-ssh-credentials only if its author may read it;
// the inline key and password are accepted with a warning at apply.
func TestSSHCredentialsSecretsAndWarnings(t *testing.T) {
	ctx := framework.Context(t)
	const user = "e2e-credentials-author"
	grant(t, user, "", rbacv1.PolicyRule{APIGroups: []string{deckhousev1alpha2.GroupName}, Resources: []string{"sshcredentials"}, Verbs: []string{"create"}})
	author, _ := clientAs(t, user)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	withRef := &deckhousev1alpha2.SSHCredentials{ObjectMeta: metav1.ObjectMeta{Name: "secret-ref"}, Spec: deckhousev1alpha2.SSHCredentialsSpec{User: "root",
		PrivateSSHKeySecretRef: &deckhousev1alpha2.SSHCredentialsSecretRef{Name: "someone-elses-key"}}}
	var err error
	framework.Poll(t, "SSHCredentials naming a Secret its author may not read refused", func(ctx context.Context) (bool, error) {
		_, err = author.DeckhouseV1alpha2().SSHCredentialses().Create(ctx, withRef, dry)
		return err != nil, nil
	})
	mustRefuse(t, "SSHCredentials naming a Secret its author may not read", err, "may not read Secret "+deckhousev1.SSHCredentialsNamespace+"/someone-elses-key")
	grant(t, user, deckhousev1.SSHCredentialsNamespace, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
		ResourceNames: []string{"someone-elses-key"}})
	if _, err := author.DeckhouseV1alpha2().SSHCredentialses().Create(ctx, withRef, dry); err != nil {
		t.Errorf("SSHCredentials naming a Secret its author may read: %v", err)
	}
	both := withRef.DeepCopy()
	both.Spec.PrivateSSHKey = b64([]byte("a key"))
	_, err = f.NM.DeckhouseV1alpha2().SSHCredentialses().Create(ctx, both, dry)
	mustRefuse(t, "SSHCredentials with the key inline and in a Secret", err, "not both")

	admin, w := clientAs(t, "")
	inline := &deckhousev1alpha2.SSHCredentials{ObjectMeta: metav1.ObjectMeta{Name: "inline"}, Spec: deckhousev1alpha2.SSHCredentialsSpec{User: "caps",
		PrivateSSHKey: b64([]byte("a key")), SudoPasswordEncoded: b64([]byte("a password"))}}
	framework.Poll(t, "a warning about the inline key and password", func(ctx context.Context) (bool, error) {
		if _, err := admin.DeckhouseV1alpha2().SSHCredentialses().Create(ctx, inline, dry); err != nil {
			return false, err
		}
		got := w.take()
		return strings.Contains(got, "spec.privateSSHKey keeps the private key") && strings.Contains(got, "spec.sudoPasswordEncoded keeps the password"), nil
	})
	if _, err := admin.DeckhouseV1alpha2().SSHCredentialses().Create(ctx, withRef, dry); err != nil || w.take() != "" {
		t.Errorf("SSHCredentials with Secret references: %v, want no warning", err)
	}
}

// etcdValues scans every object kube-apiserver stored under /registry/ in
// etcd (through etcd's JSON gateway: the local control plane's etcd
// listens on loopback without TLS) and returns the keys whose value holds
// any of needles.
func etcdValues(t *testing.T, needles ...[]byte) (found []string, keys map[string]bool) {
	t.Helper()
	port := 0
	for _, p := range f.CP.Processes() {
		if p.Name == "etcd" && len(p.Ports) > 0 {
			port = p.Ports[0]
		}
	}
	if port == 0 {
		t.Fatal("no etcd among the control plane's processes")
	}
	b64s := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	body, _ := json.Marshal(map[string]string{"key": b64s("/registry/"), "range_end": b64s("/registry0")})
	req, err := http.NewRequestWithContext(framework.Context(t), http.MethodPost, "http://127.0.0.1:"+strconv.Itoa(port)+"/v3/kv/range", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("read etcd: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Kvs []struct {
			Key   []byte `json:"key"`
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("read etcd: %d %v", resp.StatusCode, err)
	}
	keys = map[string]bool{}
	for _, kv := range out.Kvs {
		keys[string(kv.Key)] = true
		for _, n := range needles {
			if bytes.Contains(kv.Value, n) {
				found = append(found, string(kv.Key))
				break
			}
		}
	}
	return found, keys
}

// TestCAPSFromSecretsNeverContactsUnpinned (issue 35, items 5 and 14): an
// SSHCredentials whose key and password are Secret references of
// d8-ssh-credentials. Its StaticInstance, with neither a pinned host key
// nor an admin's leave to trust on first use, is picked by no machine and
// never contacted (its sshd accepts no login, the bootstrap never starts):
// Error, HostKeyTrusted=False with reason HostKeyNotPinned, and an Event.
// Once an admin pins the host's key it goes Pending, CAPS logs in with the
// key read from the Secret and bootstraps the host, which joins. etcd then
// holds the key and the password in the Secrets alone: no other object
// (the SSHCredentials, the StaticInstance, Events, ...) holds them.
func TestCAPSFromSecretsNeverContactsUnpinned(t *testing.T) {
	const name = "caps-secrets"
	showCAPSLog(t)
	ctx := framework.Context(t)
	logins := framework.NewSSHLogins(t)
	h := startHosts(t, logins, "secrets", 1)[0]
	secrets := f.Kube.CoreV1().Secrets(deckhousev1.SSHCredentialsNamespace)
	password := "pw-" + logins.Password
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: name + "-key"}, Type: corev1.SecretTypeSSHAuth,
			Data: map[string][]byte{deckhousev1.SSHPrivateKeySecretKey: logins.SudoKey}},
		{ObjectMeta: metav1.ObjectMeta{Name: name + "-password"}, Type: corev1.SecretTypeBasicAuth,
			Data: map[string][]byte{deckhousev1.SSHPasswordSecretKey: []byte(password), corev1.BasicAuthUsernameKey: []byte(logins.SudoUser)}},
	} {
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Secret %s: %v", s.Name, err)
		}
		t.Cleanup(func() { _ = secrets.Delete(context.Background(), s.Name, metav1.DeleteOptions{}) })
	}
	testCredentials(t, name, deckhousev1alpha2.SSHCredentialsSpec{User: logins.SudoUser, SSHPort: int32(h.Port),
		PrivateSSHKeySecretRef: &deckhousev1alpha2.SSHCredentialsSecretRef{Name: name + "-key"},
		SudoPasswordSecretRef:  &deckhousev1alpha2.SSHCredentialsSecretRef{Name: name + "-password"}})
	testInstance(t, h, name, map[string]string{"role": name}, map[string]string{})
	scale := scriptedMachines(t, name, 1)

	// Refused, never contacted, while a machine waits for a host.
	waitPhase(t, h.instance, deckhousev1alpha2.StaticInstanceError, false)
	framework.Poll(t, "the machine waiting for a host", func(ctx context.Context) (bool, error) {
		sms, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, sm := range sms.Items {
			if strings.HasPrefix(sm.Name, name) && machineOf(&sm) != "" {
				return true, nil
			}
		}
		return false, nil
	})
	f.WaitEventNote(t, h.instance, "HostKeyNotPinned", deckhousev1.SSHHostKeyAnnotation)
	inst, err := instance(ctx, h.instance)
	if err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(inst.Status.Conditions, "HostKeyTrusted")
	if phase(inst) != deckhousev1alpha2.StaticInstanceError || inst.Status.MachineRef != nil || cond == nil ||
		cond.Status != metav1.ConditionFalse || cond.Reason != "HostKeyNotPinned" {
		t.Fatalf("an unpinned instance without trust on first use: phase %q, machineRef %v, HostKeyTrusted %+v; want Error, unbound, HostKeyNotPinned",
			phase(inst), inst.Status.MachineRef, cond)
	}
	if n := h.Logins(); n != 0 || runs(h) != 0 || h.has(hostssh.ProviderIDFile) {
		t.Fatalf("the unpinned host was contacted: %d logins, %d bootstrap runs", n, runs(h))
	}

	// An admin pins the key: the host is used, logged in to with the key
	// from the Secret.
	patchInstance(t, h.instance, `{"metadata":{"annotations":{"`+deckhousev1.SSHHostKeyAnnotation+`":`+strconv.Quote(h.HostKey)+`}}}`)
	waitRuns(t, h, 1)
	waitPhase(t, h.instance, deckhousev1alpha2.StaticInstanceBootstrapping, true)
	if err := os.WriteFile(h.file("var/tmp/release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	playKubelet(t, h, "", "var/lib/bashible/bootstrapped")
	inst = waitPhase(t, h.instance, deckhousev1alpha2.StaticInstanceRunning, true)
	if c := meta.FindStatusCondition(inst.Status.Conditions, "HostKeyTrusted"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("HostKeyTrusted once pinned: %+v", c)
	}

	// etcd: the key and the password are in their Secrets and nowhere else.
	pemLines := strings.Split(strings.TrimSpace(string(logins.SudoKey)), "\n")
	keyLine := []byte(pemLines[len(pemLines)/2])
	needles := [][]byte{keyLine, []byte(b64(logins.SudoKey)[:48]), []byte(password), []byte(b64([]byte(password)))}
	found, keys := etcdValues(t, needles...)
	credsKey := "/registry/" + deckhousev1alpha2.GroupName + "/sshcredentials/" + name
	if !keys[credsKey] {
		t.Fatalf("etcd has no %s: the scan read the wrong place", credsKey)
	}
	var inSecrets, elsewhere []string
	for _, k := range found {
		if strings.HasPrefix(k, "/registry/secrets/"+deckhousev1.SSHCredentialsNamespace+"/"+name) {
			inSecrets = append(inSecrets, k)
		} else {
			elsewhere = append(elsewhere, k)
		}
	}
	if len(inSecrets) != 2 {
		t.Errorf("the scan found the key material in %v, want both Secrets (the scan must see what is there)", inSecrets)
	}
	if len(elsewhere) > 0 {
		t.Errorf("etcd holds the key or the password outside their Secrets: %v", elsewhere)
	}
	scale(0)
	waitPhase(t, h.instance, deckhousev1alpha2.StaticInstancePending, false)
}

// sar is a SubjectAccessReview of user for verb on the resource (in
// namespace, "" for cluster-scoped).
func sar(user, namespace, group, resource, verb, name string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Group: group, Resource: resource, Verb: verb, Name: name}}}
}
