package caps

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// capsUser is caps-controller-manager's ServiceAccount as kube-apiserver
// sees it.
const capsUser = "system:serviceaccount:" + deckhousev1.Namespace + ":" + deckhousev1.CAPSControllerManagerName

// asCAPS is a client impersonating caps-controller-manager's
// ServiceAccount (with the groups its token carries).
func asCAPS(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: capsUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deckhousev1.Namespace, "system:authenticated"}}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// grantBootstrapData lets caps-controller-manager get the Secret name of
// ns, and no other, as an admin does for the bootstrap data of a
// MachineDeployment made by hand.
func grantBootstrapData(t *testing.T, name string) {
	t.Helper()
	ctx := framework.Context(t)
	roleName := "e2e-bootstrap-data-" + name
	roles, bindings := f.Kube.RbacV1().Roles(ns), f.Kube.RbacV1().RoleBindings(ns)
	if _, err := roles.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: roleName},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{name}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role %s: %v", roleName, err)
	}
	t.Cleanup(func() { _ = roles.Delete(context.Background(), roleName, metav1.DeleteOptions{}) })
	if _, err := bindings.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: roleName},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: deckhousev1.CAPSControllerManagerName, Namespace: deckhousev1.Namespace}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding %s: %v", roleName, err)
	}
	t.Cleanup(func() { _ = bindings.Delete(context.Background(), roleName, metav1.DeleteOptions{}) })
}

// TestCAPSReadsOnlyItsMachinesBootstrapData (issue 35, item 18): as
// caps-controller-manager's ServiceAccount, get on the bootstrap Secret of
// a group wired to Cluster API is allowed, and granted before the group's
// MachineDeployment exists; get on bashible-apiserver's serving key, on a
// static group's manual-bootstrap Secret that is not wired to Cluster API,
// on the wired group's bootstrap-token Secret and a list of the
// namespace's Secrets are refused. Once the group goes, so does the grant.
func TestCAPSReadsOnlyItsMachinesBootstrapData(t *testing.T) {
	const wired, manual = "caps-data", "caps-data-manual"
	ctx := framework.Context(t)
	caps := asCAPS(t)
	secrets := f.Kube.CoreV1().Secrets(ns)
	wiredSecret, manualSecret := deckhousev1.ManualBootstrapSecretPrefix+wired, deckhousev1.ManualBootstrapSecretPrefix+manual

	f.TestGroup(t, framework.NewGroup(manual))
	group := f.TestGroup(t, framework.NewGroup(wired, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.StaticInstances = &deckhousev1.StaticInstancesSpec{Count: 0,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": wired}}}
	}))

	// The grant comes before the MachineDeployment: once that exists, the
	// Role names the group's Secret.
	framework.Poll(t, "the MachineDeployment of group "+wired, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(ns).Get(ctx, wired, metav1.GetOptions{})
		return err == nil, nil
	})
	role, err := f.Kube.RbacV1().Roles(ns).Get(ctx, deckhousev1.CAPSBootstrapDataRole, metav1.GetOptions{})
	if err != nil {
		t.Errorf("the MachineDeployment exists but not the Role granting CAPS its bootstrap data: %v", err)
	} else if !grants(role, wiredSecret) {
		t.Errorf("the MachineDeployment exists but Role %s does not grant %s yet: %+v", role.Name, wiredSecret, role.Rules)
	}

	// Allowed: the wired group's bootstrap data, once written.
	framework.Poll(t, "caps-controller-manager reads Secret "+wiredSecret, func(ctx context.Context) (bool, error) {
		s, err := caps.CoreV1().Secrets(ns).Get(ctx, wiredSecret, metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return false, err
		}
		return err == nil && len(s.Data[deckhousev1.ManualBootstrapScriptKey]) > 0, nil
	})

	// Refused: every other Secret, existing or not.
	framework.Poll(t, "Secret "+manualSecret+" written", func(ctx context.Context) (bool, error) {
		_, err := secrets.Get(ctx, manualSecret, metav1.GetOptions{})
		return err == nil, nil
	})
	var token string
	framework.Poll(t, "a bootstrap token of group "+wired, func(ctx context.Context) (bool, error) {
		l, err := f.Kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.TokenNodeGroupLabel + "=" + wired})
		if err != nil || len(l.Items) == 0 {
			return false, nil
		}
		token = l.Items[0].Name
		return true, nil
	})
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("caps-controller-manager: %s: %v, want Forbidden", what, err)
		}
	}
	for _, name := range []string{deckhousev1.BashibleAPIServerTLSSecret, manualSecret, deckhousev1.ConfigurationChecksumsSecret, infrav1alpha1.StaticKubeconfigSecret} {
		_, err := caps.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		refused("get Secret "+ns+"/"+name, err)
	}
	_, err = caps.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, token, metav1.GetOptions{})
	refused("get bootstrap-token Secret "+metav1.NamespaceSystem+"/"+token, err)
	_, err = caps.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	refused("list the Secrets of "+ns, err)

	// The group goes: so does the grant.
	if err := f.NM.DeckhouseV1().NodeGroups().Delete(ctx, group.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the grant of "+wiredSecret+" withdrawn", func(ctx context.Context) (bool, error) {
		_, err := caps.CoreV1().Secrets(ns).Get(ctx, wiredSecret, metav1.GetOptions{})
		return apierrors.IsForbidden(err), nil
	})
}

// grants reports whether role lets its subjects get Secret name by name.
func grants(role *rbacv1.Role, name string) bool {
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, "get") && slices.Contains(r.ResourceNames, name) {
			return true
		}
	}
	return false
}

// TestCAPSWaitsForItsBootstrapData (issue 35, item 18): a Machine whose
// bootstrap Secret caps-controller-manager may not read does not start a
// bootstrap on its host; its StaticMachine says which Secret and why
// (BootstrapDataUnavailable), and once the Secret is granted CAPS, which
// kept trying, bootstraps the host.
func TestCAPSWaitsForItsBootstrapData(t *testing.T) {
	const name = "caps-ungranted"
	showCAPSLog(t)
	logins := framework.NewSSHLogins(t)
	h := startHosts(t, logins, "ungranted", 1)[0]
	testCredentials(t, name, deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: int32(h.Port)})
	testInstance(t, h, name, map[string]string{"role": name}, nil)
	scale := ungrantedScriptedMachines(t, name, 1)

	// Picked (Bootstrapping), but no bootstrap starts without its data.
	inst := waitPhase(t, h.instance, deckhousev1alpha2.StaticInstanceBootstrapping, true)
	sms := f.NM.InfrastructureV1alpha1().StaticMachines(ns)
	framework.Poll(t, "the StaticMachine saying its bootstrap data is unreadable", func(ctx context.Context) (bool, error) {
		sm, err := sms.Get(ctx, inst.Status.MachineRef.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(sm.Status.Conditions, "Ready")
		if c == nil || c.Reason != infrav1alpha1.BootstrapDataUnavailableReason {
			return false, nil
		}
		for _, want := range []string{ns + "/" + name, deckhousev1.CAPSBootstrapDataRole, "trying again"} {
			if !strings.Contains(c.Message, want) {
				t.Errorf("the condition should name %q: %s", want, c.Message)
			}
		}
		t.Logf("Ready: %s", c.Message)
		return true, nil
	})
	if n := runs(h); n != 0 {
		t.Fatalf("%s: the bootstrap started %d times without its data", h.Name, n)
	}

	// Granted: CAPS, still trying, bootstraps the host.
	grantBootstrapData(t, name)
	waitRuns(t, h, 1)
	if err := os.WriteFile(h.file("var/tmp/release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	scale(0)
	waitPhase(t, h.instance, deckhousev1alpha2.StaticInstancePending, false)
}
