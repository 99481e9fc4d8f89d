package caps

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// refused fails the test unless err is an admission or validation refusal
// whose message contains want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s was accepted; want it refused with %q", what, want)
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Fatalf("%s: want a refusal (Invalid or Forbidden), got %v", what, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%s was refused, but the message does not say %q: %v", what, want, err)
	}
}

// newInstance is a StaticInstance of the policy tests. Its host key is
// pinned (to a key no host has), so caps-controller-manager, which refuses
// an unpinned instance by writing its status, leaves the status to the test.
func newInstance(name, address string) *deckhousev1alpha2.StaticInstance {
	return &deckhousev1alpha2.StaticInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			deckhousev1.SSHHostKeyAnnotation: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}},
		Spec: deckhousev1alpha2.StaticInstanceSpec{
			Address:        address,
			CredentialsRef: &corev1.ObjectReference{Kind: "SSHCredentials", Name: "creds"},
		},
	}
}

// createInstance creates inst, with phase written through the status
// subresource as caps-controller-manager would when phase is not "", and
// deletes it at the end of the test whatever its phase (an admin moves it
// to Pending first, as the policy asks).
func createInstance(t *testing.T, inst *deckhousev1alpha2.StaticInstance, phase deckhousev1alpha2.StaticInstancePhase) *deckhousev1alpha2.StaticInstance {
	t.Helper()
	ctx := framework.Context(t)
	c := f.NM.DeckhouseV1alpha2().StaticInstances()
	got, err := c.Create(ctx, inst, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create StaticInstance %s: %v", inst.Name, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if cur, err := c.Get(ctx, inst.Name, metav1.GetOptions{}); err == nil {
			_, _ = setPhase(ctx, cur, deckhousev1alpha2.StaticInstancePending)
		}
		_ = c.Delete(ctx, inst.Name, metav1.DeleteOptions{})
	})
	if phase != "" {
		if got, err = setPhase(ctx, got, phase); err != nil {
			t.Fatalf("set StaticInstance %s %s: %v", inst.Name, phase, err)
		}
	}
	return got
}

func setPhase(ctx context.Context, inst *deckhousev1alpha2.StaticInstance, phase deckhousev1alpha2.StaticInstancePhase) (*deckhousev1alpha2.StaticInstance, error) {
	inst = inst.DeepCopy()
	now := metav1.Now()
	inst.Status.CurrentStatus = &deckhousev1alpha2.StaticInstanceCurrentStatus{Phase: phase, LastUpdateTime: &now}
	return f.NM.DeckhouseV1alpha2().StaticInstances().UpdateStatus(ctx, inst, metav1.UpdateOptions{})
}

// TestSSHCredentialsNeedKeyOrPassword: the CRD's CEL rule refuses
// credentials with neither a key nor a password, and defaults the port.
func TestSSHCredentialsNeedKeyOrPassword(t *testing.T) {
	ctx := framework.Context(t)
	c := f.NM.DeckhouseV1alpha2().SSHCredentialses()
	_, err := c.Create(ctx, &deckhousev1alpha2.SSHCredentials{
		ObjectMeta: metav1.ObjectMeta{Name: "neither"},
		Spec:       deckhousev1alpha2.SSHCredentialsSpec{User: "caps"},
	}, metav1.CreateOptions{})
	refused(t, "SSHCredentials without key or password", err, "set privateSSHKey")

	for name, spec := range map[string]deckhousev1alpha2.SSHCredentialsSpec{
		"key":      {User: "root", PrivateSSHKey: base64.StdEncoding.EncodeToString([]byte("a key"))},
		"password": {User: "caps", SudoPasswordEncoded: base64.StdEncoding.EncodeToString([]byte("a password"))},
	} {
		got, err := c.Create(ctx, &deckhousev1alpha2.SSHCredentials{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SSHCredentials with a %s: %v", name, err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		if got.Spec.SSHPort != 22 {
			t.Errorf("SSHCredentials %s: sshPort defaulted to %d, want 22", name, got.Spec.SSHPort)
		}
	}
}

// TestStaticInstanceAddressIsImmutable: the CRD's transition rule.
func TestStaticInstanceAddressIsImmutable(t *testing.T) {
	ctx := framework.Context(t)
	_, err := f.NM.DeckhouseV1alpha2().StaticInstances().Create(ctx, newInstance("bad-address", "host.example"), metav1.CreateOptions{})
	refused(t, "a StaticInstance whose address is a name", err, "spec.address")

	inst := createInstance(t, newInstance("immutable", "192.0.2.10"), "")
	inst.Spec.Address = "192.0.2.11"
	_, err = f.NM.DeckhouseV1alpha2().StaticInstances().Update(ctx, inst, metav1.UpdateOptions{})
	refused(t, "changing a StaticInstance's address", err, "spec.address is immutable")
}

// TestStaticInstanceDeletionOnlyWhenFree: a host CAPS bootstraps, runs or
// cleans cannot be deleted; a Pending, Error or never-seen one can.
func TestStaticInstanceDeletionOnlyWhenFree(t *testing.T) {
	ctx := framework.Context(t)
	c := f.NM.DeckhouseV1alpha2().StaticInstances()
	for i, phase := range []deckhousev1alpha2.StaticInstancePhase{
		deckhousev1alpha2.StaticInstanceBootstrapping, deckhousev1alpha2.StaticInstanceRunning, deckhousev1alpha2.StaticInstanceCleaning,
	} {
		name := "busy-" + strings.ToLower(string(phase))
		createInstance(t, newInstance(name, fmt.Sprintf("192.0.2.%d", 20+i)), phase)
		refused(t, "deleting a "+string(phase)+" StaticInstance", c.Delete(ctx, name, metav1.DeleteOptions{}), "may be deleted only when Pending or Error")
	}
	for i, phase := range []deckhousev1alpha2.StaticInstancePhase{"", deckhousev1alpha2.StaticInstancePending, deckhousev1alpha2.StaticInstanceError} {
		name := fmt.Sprintf("free-%d", i)
		createInstance(t, newInstance(name, fmt.Sprintf("192.0.2.%d", 30+i)), phase)
		if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting a StaticInstance in phase %q: %v", phase, err)
		}
	}
}

// TestSkipBootstrapPhaseOnlyWhenPending: adoption may be asked for only on
// a free host: Pending, or in Error and bound to no machine.
func TestSkipBootstrapPhaseOnlyWhenPending(t *testing.T) {
	ctx := framework.Context(t)
	c := f.NM.DeckhouseV1alpha2().StaticInstances()
	busy := createInstance(t, newInstance("adopt-busy", "192.0.2.40"), deckhousev1alpha2.StaticInstanceBootstrapping)
	busy.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation] = ""
	_, err := c.Update(ctx, busy, metav1.UpdateOptions{})
	refused(t, "annotating a Bootstrapping StaticInstance skip-bootstrap-phase", err, "may be added only while the StaticInstance is Pending")

	free := createInstance(t, newInstance("adopt-free", "192.0.2.41"), deckhousev1alpha2.StaticInstancePending)
	free.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation] = ""
	if _, err := c.Update(ctx, free, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("annotating a Pending StaticInstance skip-bootstrap-phase: %v", err)
	}

	// In Error and free (CAPS refused its address: a running node's, which
	// the annotation hands over); in Error and still bound, not.
	refusedFree := createInstance(t, newInstance("adopt-error-free", "192.0.2.42"), deckhousev1alpha2.StaticInstanceError)
	refusedFree.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation] = ""
	if _, err := c.Update(ctx, refusedFree, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("annotating a free StaticInstance in Error skip-bootstrap-phase: %v", err)
	}
	bound := createInstance(t, newInstance("adopt-error-bound", "192.0.2.43"), "")
	bound.Status.MachineRef = &corev1.ObjectReference{Kind: "StaticMachine", Namespace: ns, Name: "adopt-error-bound"}
	bound, err = setPhase(ctx, bound, deckhousev1alpha2.StaticInstanceError)
	if err != nil {
		t.Fatal(err)
	}
	bound.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation] = ""
	_, err = c.Update(ctx, bound, metav1.UpdateOptions{})
	refused(t, "annotating a bound StaticInstance in Error skip-bootstrap-phase", err, "may be added only while the StaticInstance is Pending")
}

// TestAllowBootstrapLabel: its value is true or false, and a group's
// selector may not name it.
func TestAllowBootstrapLabel(t *testing.T) {
	ctx := framework.Context(t)
	inst := newInstance("allow-maybe", "192.0.2.50")
	inst.Labels = map[string]string{deckhousev1.AllowBootstrapLabel: "maybe"}
	_, err := f.NM.DeckhouseV1alpha2().StaticInstances().Create(ctx, inst, metav1.CreateOptions{})
	refused(t, "allow-bootstrap=maybe", err, `is "true" or "false"`)
	inst.Labels[deckhousev1.AllowBootstrapLabel] = "false"
	createInstance(t, inst, "")

	for name, sel := range map[string]*metav1.LabelSelector{
		"labels":      {MatchLabels: map[string]string{deckhousev1.AllowBootstrapLabel: "true"}},
		"expressions": {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: deckhousev1.AllowBootstrapLabel, Operator: metav1.LabelSelectorOpExists}}},
	} {
		_, err := f.CreateGroup(ctx, &deckhousev1.NodeGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "selector-" + name},
			Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic,
				StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 1, LabelSelector: sel}},
		})
		refused(t, "a group whose staticInstances selector names allow-bootstrap in its "+name, err, "may not use the key")
	}
	f.TestGroup(t, &deckhousev1.NodeGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "selector-ok"},
		Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic,
			StaticInstances: &deckhousev1.StaticInstancesSpec{Count: 1, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}}}},
	})
}

// TestSSHCredentialsReadableOnlyByCAPS asks kube-apiserver's authorizer
// who may read SSHCredentials and the Secrets of d8-ssh-credentials they
// name: caps-controller-manager and cluster admins, and none of
// node-manager's other identities nor an ordinary user; and that CAPS may
// only get those Secrets, one at a time, never list or watch them.
func TestSSHCredentialsReadableOnlyByCAPS(t *testing.T) {
	ctx := framework.Context(t)
	sa := func(name string) string { return "system:serviceaccount:" + deckhousev1.Namespace + ":" + name }
	for _, c := range []struct {
		user   string
		groups []string
		want   bool
	}{
		{user: sa(deckhousev1.CAPSControllerManagerName), groups: []string{"system:serviceaccounts"}, want: true},
		{user: "admin", groups: []string{"system:masters"}, want: true},
		{user: sa(deckhousev1.NodeManagerControllerName), groups: []string{"system:serviceaccounts"}},
		{user: sa(deckhousev1.BashibleAPIServerName), groups: []string{"system:serviceaccounts"}},
		{user: sa(deckhousev1.FencingAgentName), groups: []string{"system:serviceaccounts"}},
		{user: sa(deckhousev1.EarlyOOMName), groups: []string{"system:serviceaccounts"}},
		{user: "system:node:worker-1", groups: []string{"system:nodes"}},
		{user: "someone", groups: []string{"system:authenticated"}},
	} {
		for _, verb := range []string{"get", "list", "watch"} {
			review, err := f.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: c.user, Groups: c.groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Group: deckhousev1alpha2.GroupName, Resource: "sshcredentials", Verb: verb, Name: "any"}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SubjectAccessReview for %s: %v", c.user, err)
			}
			if review.Status.Allowed != c.want {
				t.Errorf("%s %s sshcredentials: allowed=%v, want %v (%s)", c.user, verb, review.Status.Allowed, c.want, review.Status.Reason)
			}
			want := c.want && (verb == "get" || c.user == "admin")
			review, err = f.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: c.user, Groups: c.groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: deckhousev1.SSHCredentialsNamespace, Resource: "secrets", Verb: verb, Name: "any"}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SubjectAccessReview for %s: %v", c.user, err)
			}
			if review.Status.Allowed != want {
				t.Errorf("%s %s secrets in %s: allowed=%v, want %v (%s)", c.user, verb, deckhousev1.SSHCredentialsNamespace, review.Status.Allowed, want, review.Status.Reason)
			}
		}
	}
}
