package fencing

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/fencing"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// Nothing resets a node fenced in Notify mode, so a dead Notify node may
// be only cut off and still run its pods: freeing a pod with a
// ReadWriteOnce volume (a StatefulSet's) would run it twice. Such pods
// stay, by their claims' access modes (ReadWriteOnce, and a claim of a
// generic ephemeral volume); the node's other pods, one with a
// ReadWriteMany claim included, are freed as before, and the Event says
// which pods were kept. A group that opts in
// (fencing-notify-free-readwriteonce=true, warned about at apply) has
// them freed too.
func TestANotifyNodesPodsWithReadWriteOnceVolumesSurvive(t *testing.T) {
	fencedGroup(t, "notify-rwo", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeNotify)
	hb := fencedNode(t, "notify-rwo-0", "notify-rwo", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeNotify, nil)
	claimOf(t, "rwo-data", corev1.ReadWriteOnce)
	claimOf(t, "rwx-data", corev1.ReadWriteMany)
	claimOf(t, "rwo-ephemeral-app-scratch", corev1.ReadWriteOnce)
	podWithVolume(t, "notify-rwo-0", "rwo-app", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "rwo-data"}})
	podWithVolume(t, "notify-rwo-0", "rwo-ephemeral-app", corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}},
	}})
	podWithVolume(t, "notify-rwo-0", "rwx-app", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "rwx-data"}})
	podOn(t, "notify-rwo-0", "plain-app")

	hb.Pause()
	framework.Poll(t, "the dead Notify node's pods without ReadWriteOnce volumes freed", func(ctx context.Context) (bool, error) {
		for _, p := range []string{"rwx-app", "plain-app"} {
			if gone, err := podGone(ctx, p); !gone || err != nil {
				return false, err
			}
		}
		return true, nil
	})
	for _, p := range []string{"rwo-app", "rwo-ephemeral-app"} {
		if gone, err := podGone(framework.Context(t), p); gone || err != nil {
			t.Errorf("pod %s, with a ReadWriteOnce volume, of a dead Notify node was freed (%v): nothing reset the node, so it may run twice", p, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	note := f.WaitEventNote(t, "notify-rwo-0", fencing.ReasonFenced, "2 pod(s) with ReadWriteOnce volumes kept")
	for _, p := range []string{"rwo-app", "rwo-ephemeral-app"} {
		if !strings.Contains(note, "default/"+p) {
			t.Errorf("the Event does not name kept pod %s: %s", p, note)
		}
	}

	// The group opts in: its author is warned, and the next dead node's
	// ReadWriteOnce pod is freed.
	out := f.Kubectl(t, "annotate", "nodegroup", "notify-rwo", deckhousev1.FencingNotifyFreeReadWriteOnceAnnotation+"=true")
	if !strings.Contains(out, "Warning:") || !strings.Contains(out, "will be force-deleted, though in Notify mode nothing resets the node") {
		t.Errorf("opting in printed no warning:\n%s", out)
	}
	framework.Poll(t, "the opt-in seen by the controller's cache", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "notify-rwo", metav1.GetOptions{})
		return err == nil && ng.Annotations[deckhousev1.FencingNotifyFreeReadWriteOnceAnnotation] == "true", err
	})
	hb1 := fencedNode(t, "notify-rwo-1", "notify-rwo", deckhousev1.NodeTypeCloudPermanent, deckhousev1.FencingModeNotify, nil)
	claimOf(t, "rwo-data-1", corev1.ReadWriteOnce)
	podWithVolume(t, "notify-rwo-1", "rwo-app-1", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "rwo-data-1"}})
	hb1.Pause()
	framework.Poll(t, "the ReadWriteOnce pod of a dead node of an opted-in Notify group freed", func(ctx context.Context) (bool, error) {
		return podGone(ctx, "rwo-app-1")
	})
	if gone, err := podGone(framework.Context(t), "rwo-app"); gone || err != nil {
		t.Errorf("pod rwo-app of the node fenced before the opt-in was freed since (%v)", err)
	}
}

// claimOf makes a PersistentVolumeClaim with one access mode (it stays
// Pending: nothing provisions it, and nothing needs to).
func claimOf(t *testing.T, name string, mode corev1.PersistentVolumeAccessMode) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := f.Kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(framework.Context(t), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().PersistentVolumeClaims(pvc.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// podWithVolume is podOn with one volume, mounted by its container.
func podWithVolume(t *testing.T, node, name string, source corev1.VolumeSource) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: new(bool),
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Volumes:                      []corev1.Volume{{Name: "scratch", VolumeSource: source}},
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1",
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/data"}}}},
		},
	}
	framework.Poll(t, "create pod "+name, func(ctx context.Context) (bool, error) {
		_, err := f.Kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return err == nil, nil
	})
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
}
