package caps

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/caps/hostssh"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestRefusedCleanupWaitsUntilAllowed (issue 35, item 16): a machine whose
// host joined as a control-plane node is scaled away. CAPS refuses to clean
// the host, and says so where a person looks: the StaticInstance's Cleaned
// condition and an Event, the StaticMachine's Ready condition (which
// Cluster API mirrors into the Machine's InfrastructureReady) and the
// node's Instance (status.lastOperation, written by node-manager-
// controller). The machine waits, its host untouched. Once the refusal no
// longer holds (allow-control-plane on the StaticInstance), the cleanup
// runs, the machine goes, and the Instance no longer reports a refusal.
func TestRefusedCleanupWaitsUntilAllowed(t *testing.T) {
	const name = "caps-refused-cleanup"
	showCAPSLog(t)
	logins := framework.NewSSHLogins(t)
	h := startHosts(t, logins, "refused", 1)[0]
	testCredentials(t, name, deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: int32(h.Port)})
	testInstance(t, h, name, map[string]string{"role": name}, nil)
	scale := scriptedMachines(t, name, 1)

	// The host joins as a control-plane node.
	waitRuns(t, h, 1)
	if err := os.WriteFile(h.file("var/tmp/release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, h.Name+": its bootstrap finished", func(context.Context) (bool, error) {
		return h.has("var/lib/bashible/bootstrapped") && h.has(hostssh.ProviderIDFile), nil
	})
	installCleanup(t, h)
	node := hostNode(t, h, deckhousev1.MasterNodeGroup)
	node.Labels[deckhousev1.ControlPlaneRoleLabel] = ""
	node.Annotations = map[string]string{deckhousev1.ConfigurationChecksumAnnotation: "e2e"}
	registerNode(t, node)
	instances := f.NM.DeckhouseV1alpha1().Instances()
	if _, err := instances.Create(framework.Context(t), framework.NewInstance(h.Name, deckhousev1.MasterNodeGroup), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Instance %s: %v", h.Name, err)
	}
	t.Cleanup(func() { _ = instances.Delete(context.Background(), h.Name, metav1.DeleteOptions{}) })
	si := waitPhase(t, h.instance, deckhousev1alpha2.StaticInstanceRunning, true)
	smName := si.Status.MachineRef.Name
	framework.Poll(t, "Instance "+h.Name+" linked to its Machine", func(ctx context.Context) (bool, error) {
		inst, err := instances.Get(ctx, h.Name, metav1.GetOptions{})
		return err == nil && inst.Status.MachineRef != nil, nil
	})

	// Scaled away: refused, reported, waiting.
	scale(0)
	note := f.WaitEventNote(t, h.instance, "ControlPlaneCleanupRefused", deckhousev1.AllowControlPlaneAnnotation)
	t.Logf("Event: %s", note)
	framework.Poll(t, "the refusal on the StaticInstance", func(ctx context.Context) (bool, error) {
		si, err := instance(ctx, h.instance)
		if err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(si.Status.Conditions, "Cleaned")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "ControlPlaneCleanupRefused" &&
			strings.Contains(c.Message, deckhousev1.AllowControlPlaneAnnotation), nil
	})
	sms := f.NM.InfrastructureV1alpha1().StaticMachines(ns)
	framework.Poll(t, "the refusal on StaticMachine "+smName, func(ctx context.Context) (bool, error) {
		sm, err := sms.Get(ctx, smName, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("the StaticMachine went while its host's cleanup is refused: %w", err)
		}
		c := meta.FindStatusCondition(sm.Status.Conditions, "Ready")
		return sm.DeletionTimestamp != nil && c != nil && c.Status == metav1.ConditionFalse && c.Reason == infrav1alpha1.CleanupRefusedReason &&
			strings.Contains(c.Message, deckhousev1.AllowControlPlaneAnnotation), nil
	})
	machine := ""
	framework.Poll(t, "the refusal on the Machine (InfrastructureReady, mirrored by Cluster API)", func(ctx context.Context) (bool, error) {
		for _, m := range listMachines(ctx) {
			c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineInfrastructureReadyCondition)
			if m.Spec.InfrastructureRef.Name == smName && c != nil && c.Reason == infrav1alpha1.CleanupRefusedReason {
				machine = m.Name
				return true, nil
			}
		}
		return false, nil
	})
	framework.Poll(t, "the refusal on Instance "+h.Name, func(ctx context.Context) (bool, error) {
		inst, err := instances.Get(ctx, h.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		op := inst.Status.LastOperation
		return op != nil && op.Type == "Delete" && strings.Contains(op.Description, machine) &&
			strings.Contains(op.Description, deckhousev1.AllowControlPlaneAnnotation), nil
	})
	if h.has(cleanedMarker) {
		t.Fatalf("%s: the control-plane node was cleaned", h.Name)
	}

	// The refusal no longer holds: cleaned, released, the machine goes.
	patchInstance(t, h.instance, `{"metadata":{"annotations":{"`+deckhousev1.AllowControlPlaneAnnotation+`":"true"}}}`)
	waitPhase(t, h.instance, deckhousev1alpha2.StaticInstancePending, false)
	if !h.has(cleanedMarker) {
		t.Errorf("%s: not cleaned once allowed", h.Name)
	}
	framework.Poll(t, "Machine "+machine+" gone, its Instance reporting no refusal", func(ctx context.Context) (bool, error) {
		l, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machines")).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, u := range l.Items {
			var m clusterv1.Machine
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m) == nil && m.Name == machine {
				return false, nil
			}
		}
		inst, err := instances.Get(ctx, h.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && inst.Status.LastOperation == nil), nil
	})
}
