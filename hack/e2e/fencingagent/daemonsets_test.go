package fencingagent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
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
	// The DaemonSet policy admits the controller's image only, as the
	// release pins both to one digest.
	setPolicyImage(t, image)
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

// asController writes DaemonSets as node-manager-controller's ServiceAccount.
func asController(t *testing.T) appsv1client.DaemonSetInterface {
	t.Helper()
	cert, key, err := f.CP.IssueClientCert(stack.ControllerUser)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	cfg.CertData, cfg.KeyData = cert, key
	return kubernetes.NewForConfigOrDie(cfg).AppsV1().DaemonSets(deckhousev1.Namespace)
}

// setPolicyImage sets the image the DaemonSet policy admits (its variable
// fencingAgentImage, which the release pins) to image for the test, as an
// admin, and puts the manifests' back when the test ends.
func setPolicyImage(t *testing.T, image string) {
	t.Helper()
	ctx := framework.Context(t)
	vaps := f.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	set := func(ctx context.Context, image string) error {
		p, err := vaps.Get(ctx, daemonSetPolicy, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, v := range p.Spec.Variables {
			if v.Name == "fencingAgentImage" {
				p.Spec.Variables[i].Expression = strconv.Quote(image)
				_, err = vaps.Update(ctx, p, metav1.UpdateOptions{})
				return err
			}
		}
		return fmt.Errorf("policy %s has no variable fencingAgentImage", daemonSetPolicy)
	}
	// kube-apiserver enforces a changed policy about a second later: wait
	// until a DaemonSet of the controller's making with image is admitted.
	admitted := func(ctx context.Context, image string) error {
		ds := fencingagents.DaemonSet(framework.NewGroup("fa-image", func(ng *deckhousev1.NodeGroup) {
			ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeNotify}
		}), deckhousev1.Namespace, image)
		return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := asController(t).Create(ctx, ds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
	}
	if err := set(ctx, image); err != nil {
		t.Fatal(err)
	}
	if err := admitted(ctx, image); err != nil {
		t.Fatalf("the DaemonSet policy never admitted image %s: %v", image, err)
	}
	t.Cleanup(func() {
		if err := set(context.Background(), deckhousev1.FencingAgentName); err != nil {
			t.Errorf("restoring the DaemonSet policy's image: %v", err)
		}
		if err := admitted(context.Background(), deckhousev1.FencingAgentName); err != nil {
			t.Errorf("the restored DaemonSet policy never admitted image %s: %v", deckhousev1.FencingAgentName, err)
		}
	})
}

const daemonSetPolicy = "d8-node-manager-controller-daemonsets"

// The controller's RBAC lets it write any DaemonSet in its namespace; the
// admission policy lets it write only fencing agents.
func TestTheControllerMayWriteOnlyFencingAgentDaemonSets(t *testing.T) {
	ctx := framework.Context(t)
	asController := asController(t)
	legit := fencingagents.DaemonSet(framework.NewGroup("fa-vap", func(ng *deckhousev1.NodeGroup) {
		ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: deckhousev1.FencingModeWatchdog}
	}), deckhousev1.Namespace, deckhousev1.FencingAgentName)

	other := legit.DeepCopy()
	other.Name = "node-exporter"
	framework.Poll(t, "the DaemonSet policy enforced", func(ctx context.Context) (bool, error) {
		_, err := asController.Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
	_, err := asController.Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
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

// TestTheControllerCannotRunARootShellOnEveryNode: with the controller's
// token, a fencing-agent-<group> DaemonSet of the right name, identity,
// node selector and volumes that shares the host's PID namespace and runs
// nsenter privileged as root in another image would be a root shell on
// every node of the group (issue 35, item 12). The policy refuses it, and
// each of its parts alone; the DaemonSets the controller itself makes, in
// both modes, are admitted.
func TestTheControllerCannotRunARootShellOnEveryNode(t *testing.T) {
	ctx := framework.Context(t)
	asController := asController(t)
	make := func(mode string) *appsv1.DaemonSet {
		return fencingagents.DaemonSet(framework.NewGroup("fa-root", func(ng *deckhousev1.NodeGroup) {
			ng.Spec.Fencing = &deckhousev1.FencingSpec{Mode: mode}
		}), deckhousev1.Namespace, deckhousev1.FencingAgentName)
	}
	watchdog, notify := make(deckhousev1.FencingModeWatchdog), make(deckhousev1.FencingModeNotify)
	create := func(ds *appsv1.DaemonSet) error {
		_, err := asController.Create(ctx, ds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	variant := func(base *appsv1.DaemonSet, change func(*corev1.PodSpec, *corev1.Container)) *appsv1.DaemonSet {
		ds := base.DeepCopy()
		change(&ds.Spec.Template.Spec, &ds.Spec.Template.Spec.Containers[0])
		return ds
	}
	root := func(c *corev1.Container) {
		if c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{}
		}
		c.SecurityContext.RunAsUser, c.SecurityContext.RunAsNonRoot = new(int64(0)), new(false)
	}
	nsenter := variant(watchdog, func(p *corev1.PodSpec, c *corev1.Container) {
		p.HostPID = true
		c.Image = "registry.example/debian:12"
		c.Command = []string{"nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", "sleep", "infinity"}
		c.Args = nil
		c.SecurityContext.Privileged = new(true)
		root(c)
	})
	framework.Poll(t, "the DaemonSet policy enforced", func(ctx context.Context) (bool, error) {
		_, err := asController.Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "node-exporter"}, Spec: watchdog.Spec},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
	if err := create(nsenter); !apierrors.IsForbidden(err) {
		t.Errorf("the controller's token created the nsenter DaemonSet %s (hostPID, privileged, root, nsenter --target 1): %v; want it refused", nsenter.Name, err)
	}
	for _, tc := range []struct {
		what string
		ds   *appsv1.DaemonSet
		want string
	}{
		{"the host's PID namespace", variant(watchdog, func(p *corev1.PodSpec, _ *corev1.Container) { p.HostPID = true }), "shares no host PID or IPC namespace"},
		{"the host's IPC namespace", variant(notify, func(p *corev1.PodSpec, _ *corev1.Container) { p.HostIPC = true }), "shares no host PID or IPC namespace"},
		{"another image", variant(watchdog, func(_ *corev1.PodSpec, c *corev1.Container) { c.Image = "registry.example/debian:12" }), "of image fencing-agent"},
		{"another entrypoint", variant(watchdog, func(_ *corev1.PodSpec, c *corev1.Container) { c.Command = []string{"nsenter", "--target", "1"} }), "the agent's own entrypoint"},
		{"another flag", variant(watchdog, func(_ *corev1.PodSpec, c *corev1.Container) { c.Args = append(c.Args, "--kubeconfig=/tmp/x") }), "the agent's own entrypoint, flags"},
		{"another API server", variant(watchdog, func(_ *corev1.PodSpec, c *corev1.Container) {
			for i, a := range c.Args {
				if strings.HasPrefix(a, "--api-server=") {
					c.Args[i] = "--api-server=https://203.0.113.7:443"
				}
			}
		}), "the agent's own entrypoint, flags"},
		{"an init container", variant(watchdog, func(p *corev1.PodSpec, c *corev1.Container) {
			p.InitContainers = []corev1.Container{{Name: "init", Image: c.Image, Command: []string{"sh", "-c", "id"}}}
		}), "no init or ephemeral container"},
		{"a second container", variant(notify, func(p *corev1.PodSpec, c *corev1.Container) {
			p.Containers = append(p.Containers, corev1.Container{Name: "shell", Image: c.Image})
		}), "runs one container"},
		{"privileged in Notify mode", variant(notify, func(_ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.Privileged, c.SecurityContext.AllowPrivilegeEscalation = new(true), new(true)
		}), "privileged only in Watchdog mode"},
		{"an added capability", variant(watchdog, func(_ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}), "adds none"},
		{"root", variant(watchdog, func(_ *corev1.PodSpec, c *corev1.Container) { root(c) }), "its own non-root user"},
		{"the disk group", variant(watchdog, func(p *corev1.PodSpec, _ *corev1.Container) { p.SecurityContext.SupplementalGroups = []int64{6} }), "no supplemental group"},
		{"another runtime", variant(notify, func(p *corev1.PodSpec, _ *corev1.Container) { p.RuntimeClassName = new("runc-privileged") }), "the default runtime"},
	} {
		refused(t, tc.what, create(tc.ds), tc.want)
	}
	for _, ds := range []*appsv1.DaemonSet{watchdog, notify} {
		if err := create(ds); err != nil {
			t.Errorf("the controller's own DaemonSet (%v): %v; want it admitted", ds.Spec.Template.Spec.Containers[0].Args[0], err)
		}
	}
}
