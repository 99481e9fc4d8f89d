package fencingagent

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencingagents"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// node-manager-controller keeps a DaemonSet of agents per fenced group,
// as its ServiceAccount (the manifests' RBAC and admission policy), and
// follows the group's mode and fencing.
func TestTheControllerRunsTheAgentsOfEachFencedGroup(t *testing.T) {
	ctx := framework.Context(t)
	const image = "registry.example/fencing-agent:e2e"
	ctrl, err := f.Env.StartController(ctx, stack.ControllerOptions{Identity: "fa-ctrl", ExtraArgs: []string{"--fencing-agent-image=" + image}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	name := fencingagents.DaemonSetName("fa-ds")
	daemonSet := func(ctx context.Context) (*appsv1.DaemonSet, error) {
		ds, err := f.Kube.AppsV1().DaemonSets(deckhousev1.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return ds, err
	}

	f.TestGroup(t, framework.NewGroup("fa-ds", func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog}
	}))
	framework.Poll(t, "DaemonSet "+name+" in Watchdog mode", func(ctx context.Context) (bool, error) {
		ds, err := daemonSet(ctx)
		if ds == nil || err != nil {
			return false, err
		}
		c := ds.Spec.Template.Spec.Containers[0]
		return c.Image == image && slices.Contains(c.Args, "--mode=Watchdog") && len(ds.Spec.Template.Spec.Volumes) == 2, nil
	})

	ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "fa-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ng.Spec.Fencing.Mode = deckhousev1.FencingModeNotify
	if _, err := f.NM.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "DaemonSet "+name+" in Notify mode, without the device (only the gossip keyring)", func(ctx context.Context) (bool, error) {
		ds, err := daemonSet(ctx)
		if ds == nil || err != nil {
			return false, err
		}
		vs := ds.Spec.Template.Spec.Volumes
		return slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--mode=Notify") && len(vs) == 1 && vs[0].HostPath == nil, nil
	})
	// No update loop: the API's defaults do not count as a difference, so
	// once the DaemonSet controller has seen it the spec stays put.
	framework.Poll(t, "DaemonSet "+name+" observed by the DaemonSet controller", func(ctx context.Context) (bool, error) {
		ds, err := daemonSet(ctx)
		if ds == nil || err != nil {
			return false, err
		}
		return ds.Status.ObservedGeneration == ds.Generation, nil
	})
	if ds, _ := daemonSet(ctx); ds.Generation != 2 {
		t.Errorf("DaemonSet generation %d after one mode change, want 2", ds.Generation)
	}

	ng, err = f.NM.DeckhouseV1().NodeGroups().Get(ctx, "fa-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ng.Spec.Fencing = nil
	if _, err := f.NM.DeckhouseV1().NodeGroups().Update(ctx, ng, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "DaemonSet "+name+" deleted once the group has no fencing", func(ctx context.Context) (bool, error) {
		ds, err := daemonSet(ctx)
		return ds == nil && err == nil, err
	})
}

// The controller's RBAC lets it write any DaemonSet in its namespace; the
// admission policy lets it write only fencing agents.
func TestTheControllerMayWriteOnlyFencingAgentDaemonSets(t *testing.T) {
	ctx := framework.Context(t)
	cert, key, err := f.CP.IssueClientCert(stack.ControllerUser)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	cfg.CertData, cfg.KeyData = cert, key
	asController := kubernetes.NewForConfigOrDie(cfg).AppsV1().DaemonSets(deckhousev1.Namespace)
	legit := fencingagents.DaemonSet(framework.NewGroup("fa-vap", func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog}
	}), deckhousev1.Namespace, deckhousev1.FencingAgentName)

	other := legit.DeepCopy()
	other.Name = "node-exporter"
	framework.Poll(t, "the DaemonSet policy enforced", func(ctx context.Context) (bool, error) {
		_, err := asController.Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
	_, err = asController.Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, "a DaemonSet of another name", err, "may write only the DaemonSets fencing-agent-<group>")

	rootfs := legit.DeepCopy()
	rootfs.Spec.Template.Spec.Volumes[watchdogVolume(t, rootfs)].HostPath.Path = "/"
	_, err = asController.Create(ctx, rootfs, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, "a fencing agent mounting the host's root", err, "mounts nothing from the host but /dev/watchdog")

	anyNode := legit.DeepCopy()
	anyNode.Spec.Template.Spec.NodeSelector = nil
	_, err = asController.Create(ctx, anyNode, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, "a fencing agent on every node", err, "on the nodes of group fa-vap only")

	otherIdentity := legit.DeepCopy()
	otherIdentity.Spec.Template.Spec.ServiceAccountName = deckhousev1.NodeManagerControllerName
	_, err = asController.Create(ctx, otherIdentity, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused(t, "a fencing agent with the controller's identity", err, "run as ServiceAccount fencing-agent")

	if _, err := asController.Create(ctx, legit, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the controller may create a fencing agent's DaemonSet: %v", err)
	}
}

// watchdogVolume is the index of the DaemonSet's /dev/watchdog hostPath volume.
func watchdogVolume(t *testing.T, ds *appsv1.DaemonSet) int {
	t.Helper()
	for i, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == fencingagents.WatchdogDevice {
			return i
		}
	}
	t.Fatalf("DaemonSet %s mounts no %s", ds.Name, fencingagents.WatchdogDevice)
	return -1
}
