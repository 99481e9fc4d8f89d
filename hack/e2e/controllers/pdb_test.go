package controllers

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// blockEvictions creates a PodDisruptionBudget that allows no disruption of
// the pods labelled app=<app>, and waits until kube-controller-manager has
// computed that.
func blockEvictions(t *testing.T, app string) *policyv1.PodDisruptionBudget {
	t.Helper()
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: metav1.NamespaceDefault},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}
	pdb, err := f.Kube.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Create(framework.Context(t), pdb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Delete(context.Background(), pdb.Name, metav1.DeleteOptions{})
	})
	framework.Poll(t, "PodDisruptionBudget "+app+" computed", func(ctx context.Context) (bool, error) {
		got, err := f.Kube.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Get(ctx, pdb.Name, metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1 && got.Status.DisruptionsAllowed == 0, err
	})
	return pdb
}

// runDaemonSet runs a DaemonSet whose only pod kube-controller-manager
// places on node, and returns that pod once it runs.
func runDaemonSet(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	labels := map[string]string{"app": node + "-agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-agent", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "c", Image: "registry.example/agent:1"}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
							Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}},
				},
			},
		},
	}
	if _, err := f.Kube.AppsV1().DaemonSets(ds.Namespace).Create(framework.Context(t), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.AppsV1().DaemonSets(ds.Namespace).Delete(context.Background(), ds.Name, metav1.DeleteOptions{})
	})
	var pod *corev1.Pod
	framework.Poll(t, "DaemonSet pod on "+node, func(ctx context.Context) (bool, error) {
		pods, err := f.Kube.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + node + "-agent"})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		if p := pods.Items[0]; p.Spec.NodeName == "" {
			// There is no scheduler: bind the pod as it would.
			err := f.Kube.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: node},
			}, metav1.CreateOptions{})
			return false, err
		}
		if pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, nil
		}
		pod = &pods.Items[0]
		return true, nil
	})
	return pod
}
