// Package clusterapi is the e2e suite of node-manager's wiring to upstream
// Cluster API: the real capi-controller-manager (built from the pinned
// module, as its own ServiceAccount with manifests/capi-controller-manager's
// RBAC, its webhooks served on loopback) and the real node-manager-controller
// with --cluster-api, on a local control plane. There is no CAPS here: the
// test plays the infrastructure provider (it reports the StaticCluster and
// the StaticControlPlane ready, gives each StaticMachine a providerID and
// reports it provisioned) and the kubelet (it registers the Node with that
// providerID), and checks what Cluster API and node-manager do with it.
package clusterapi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f   = framework.New(framework.Options{ClusterAPI: true})
	dyn dynamic.Interface
	// controller is node-manager-controller (its /metrics).
	controller *stack.Controller
)

const ns = deckhousev1.Namespace

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

func setUp(ctx context.Context) (func(), error) {
	var err error
	// bashible-apiserver: the groups' bundles, which the status controller
	// waits for before it writes the groups' status.
	if _, err := f.Env.StartRegistered(ctx, stack.APIServerOptions{}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	if controller, err = f.Env.StartController(ctx, stack.ControllerOptions{ExtraArgs: []string{
		"--cluster-api", "--cluster-api-kubeconfig=" + f.CAPI.Kubeconfig,
		// The cloud of CloudEphemeral groups is played by CAPS's own API
		// (the test plays its controller): any provider's templates would do.
		"--cloud-cluster=" + infrav1alpha1.StaticClusterName,
		"--cloud-machine-template=staticmachinetemplates." + infrav1alpha1.SchemeGroupVersion.Version + "." + infrav1alpha1.GroupName,
		"--cloud-zones=" + strings.Join(cloudZones, ","),
		// A lost machine is replaced after seconds, not minutes.
		"--cloud-machine-lost-after=2s"}}); err != nil {
		return nil, fmt.Errorf("start node-manager-controller: %w", err)
	}
	if dyn, err = dynamic.NewForConfig(f.CP.AdminConfig()); err != nil {
		return nil, err
	}
	// The API endpoints the groups' bootstrap scripts name.
	if err := stack.PublishAPIEndpoints(ctx, f.Kube, "192.0.2.10"); err != nil {
		return nil, err
	}
	return nil, nil
}

// TestStaticGroupScalesThroughClusterAPI: a group with staticInstances.count
// 2 gets a MachineDeployment of 2, Cluster API makes two Machines with
// StaticMachines and links them to their Nodes; count 1 makes Cluster API
// drain and delete one Machine and its Node; deleting the Instance of the
// other node deletes its Machine (the MachineSet replaces it).
func TestStaticGroupScalesThroughClusterAPI(t *testing.T) {
	const group = "capi-static"
	f.TestGroup(t, framework.NewGroup(group, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.StaticInstances = &deckhousev1.StaticInstancesSpec{Count: 2,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": group}}}
	}))
	playProviderCluster(t)

	framework.Poll(t, "MachineDeployment "+group+" with 2 replicas and its template with the group's selector", func(ctx context.Context) (bool, error) {
		md := &clusterv1.MachineDeployment{}
		if !get(ctx, "machinedeployments", group, md) || md.Spec.Replicas == nil || *md.Spec.Replicas != 2 {
			return false, nil
		}
		if ds := md.Spec.Template.Spec.Bootstrap.DataSecretName; ds == nil || *ds != deckhousev1.ManualBootstrapSecretPrefix+group {
			return false, fmt.Errorf("bootstrap.dataSecretName = %v", ds)
		}
		tpl, err := f.NM.InfrastructureV1alpha1().StaticMachineTemplates(ns).Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return tpl.Spec.Template.Spec.LabelSelector.MatchLabels["role"] == group, nil
	})

	// Its size is the group's staticInstances.count: a scale through the
	// scale subresource (as an autoscaler's token would ask) is refused.
	_, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(ns).Patch(framework.Context(t), group,
		types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}, "scale")
	if err == nil || !strings.Contains(err.Error(), "staticInstances.count") {
		t.Errorf("a scale of the static group's MachineDeployment to 0: %v, want a refusal", err)
	}

	var machines []clusterv1.Machine
	framework.Poll(t, "two Machines, each with its StaticMachine", func(ctx context.Context) (bool, error) {
		machines = listMachines(ctx, t)
		sms, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(machines) == 2 && len(sms.Items) == 2, nil
	})
	for _, m := range machines {
		provision(t, m.Spec.InfrastructureRef.Name)
	}
	waitRunning(t, group, 2)
	// Deckhouse's series of the group's MachineDeployment; both nodes are
	// Machines', so no node is reported unmanaged.
	framework.Poll(t, "d8_caps_md_* of MachineDeployment "+group, func(ctx context.Context) (bool, error) {
		_, body, err := controller.Get(ctx, "/metrics")
		return err == nil && strings.Contains(body, `d8_caps_md_desired{machine_deployment_name="`+group+`"} 2`) &&
			strings.Contains(body, `d8_caps_md_replicas{machine_deployment_name="`+group+`"} 2`) &&
			!strings.Contains(body, "node_manager_caps_unmanaged_node{"), nil
	})

	// A machineRef that names another node's Machine (written by an admin;
	// a node may not) does not choose the Machine deleted with the
	// Instance: deleting Instance A deletes A's Machine, Cluster API's own
	// link, and leaves B's alone.
	machines = listMachines(framework.Context(t), t)
	a, b := machines[0], machines[1]
	forged := fmt.Appendf(nil, `{"status":{"machineRef":{"apiVersion":%q,"kind":"Machine","name":%q,"namespace":%q}}}`,
		clusterv1.GroupVersion.String(), b.Name, b.Namespace)
	if _, err := f.NM.DeckhouseV1alpha1().Instances().Patch(framework.Context(t), a.Status.NodeRef.Name, types.MergePatchType, forged,
		metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("writing Instance %s's machineRef as an admin: %v", a.Status.NodeRef.Name, err)
	}
	if err := f.NM.DeckhouseV1alpha1().Instances().Delete(framework.Context(t), a.Status.NodeRef.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Instance %s: %v", a.Status.NodeRef.Name, err)
	}
	framework.Poll(t, "Machine "+a.Name+" (Instance "+a.Status.NodeRef.Name+"'s by nodeRef) deleted, not "+b.Name+" that its machineRef named", func(ctx context.Context) (bool, error) {
		var aLeft bool
		for _, m := range listMachines(ctx, t) {
			switch {
			case m.UID == b.UID && m.DeletionTimestamp != nil:
				return false, fmt.Errorf("Machine %s of node %s is being deleted with another node's Instance", b.Name, b.Status.NodeRef.Name)
			case m.UID == a.UID:
				aLeft = true
			}
		}
		return !aLeft, nil
	})
	var replacement clusterv1.Machine
	framework.Poll(t, "a new Machine with its StaticMachine in place of "+a.Name+", "+b.Name+" untouched", func(ctx context.Context) (bool, error) {
		for _, m := range listMachines(ctx, t) {
			if m.UID == b.UID && m.DeletionTimestamp != nil {
				return false, fmt.Errorf("Machine %s of node %s is being deleted with another node's Instance", b.Name, b.Status.NodeRef.Name)
			}
			if m.UID != a.UID && m.UID != b.UID && m.Spec.InfrastructureRef.Name != "" {
				if _, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).Get(ctx, m.Spec.InfrastructureRef.Name, metav1.GetOptions{}); err == nil {
					replacement = m
					return true, nil
				}
			}
		}
		return false, nil
	})
	provision(t, replacement.Spec.InfrastructureRef.Name)
	waitRunning(t, group, 2)
	for _, m := range listMachines(framework.Context(t), t) {
		if m.Name == b.Name && m.UID != b.UID {
			t.Errorf("Machine %s was replaced; want it untouched by another node's Instance", b.Name)
		}
	}

	// count 2 -> 1: Cluster API cordons, drains and deletes one Machine and,
	// once its StaticMachine is gone, its Node.
	patchGroup(t, group, `{"spec":{"staticInstances":{"count":1}}}`)
	framework.Poll(t, "one Machine, one StaticMachine and one Node left after count 1", func(ctx context.Context) (bool, error) {
		sms, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		nodes, err := f.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=" + group})
		return err == nil && len(listMachines(ctx, t)) == 1 && len(sms.Items) == 1 && len(nodes.Items) == 1, nil
	})

	// Deleting the Instance of the last node deletes its Machine; the
	// MachineSet makes a new one, and the Instance goes once its Machine has.
	left := listMachines(framework.Context(t), t)[0]
	if err := f.NM.DeckhouseV1alpha1().Instances().Delete(framework.Context(t), left.Status.NodeRef.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Instance %s: %v", left.Status.NodeRef.Name, err)
	}
	framework.Poll(t, "Machine "+left.Name+" deleted with its Instance, a new Machine in its place", func(ctx context.Context) (bool, error) {
		ms := listMachines(ctx, t)
		if len(ms) != 1 || ms[0].Name == left.Name {
			return false, nil
		}
		_, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, left.Status.NodeRef.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	// Without staticInstances the group's Cluster API objects go.
	patchGroup(t, group, `{"spec":{"staticInstances":null}}`)
	framework.Poll(t, "MachineDeployment "+group+" deleted once the group has no staticInstances", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(ns).Get(ctx, group, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// waitRunning waits for n Running Machines of group
// whose Nodes Cluster API found by providerID, each with its Instance
// linked to it.
func waitRunning(t *testing.T, group string, n int) {
	t.Helper()
	framework.Poll(t, fmt.Sprintf("%d Machines Running with the Node Cluster API found by providerID, their Instances linked", n), func(ctx context.Context) (bool, error) {
		running := 0
		for _, m := range listMachines(ctx, t) {
			if m.Labels[deckhousev1.NodeGroupLabel] != group {
				continue
			}
			if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || m.Status.NodeRef.Name == "" {
				continue
			}
			inst, err := f.NM.DeckhouseV1alpha1().Instances().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{})
			if err != nil || inst.Status.MachineRef == nil || inst.Status.MachineRef.Name != m.Name || inst.Status.BootstrapStatus != nil {
				continue
			}
			running++
		}
		return running == n, nil
	})
}

// playProviderCluster waits for the Cluster objects node-manager-controller
// writes and reports them ready, as CAPS does.
func playProviderCluster(t *testing.T) {
	t.Helper()
	infra := f.NM.InfrastructureV1alpha1()
	framework.Poll(t, "Cluster static, its StaticCluster, StaticControlPlane and kubeconfig Secret", func(ctx context.Context) (bool, error) {
		if !get(ctx, "clusters", infrav1alpha1.StaticClusterName, &clusterv1.Cluster{}) {
			return false, nil
		}
		if _, err := f.Kube.CoreV1().Secrets(ns).Get(ctx, infrav1alpha1.StaticKubeconfigSecret, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if _, err := infra.StaticClusters(ns).Get(ctx, infrav1alpha1.StaticClusterName, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		_, err := infra.StaticControlPlanes(ns).Get(ctx, infrav1alpha1.StaticClusterName, metav1.GetOptions{})
		return err == nil, nil
	})
	ctx := framework.Context(t)
	if _, err := infra.StaticClusters(ns).Patch(ctx, infrav1alpha1.StaticClusterName, types.MergePatchType,
		[]byte(`{"status":{"ready":true,"initialization":{"provisioned":true}}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("reporting the StaticCluster provisioned: %v", err)
	}
	if _, err := infra.StaticControlPlanes(ns).Patch(ctx, infrav1alpha1.StaticClusterName, types.MergePatchType,
		[]byte(`{"status":{"ready":true,"initialized":true,"externalManagedControlPlane":true,"initialization":{"controlPlaneInitialized":true}}}`),
		metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("reporting the StaticControlPlane initialized: %v", err)
	}
}

// provision plays CAPS and the kubelet for one StaticMachine: a providerID,
// provisioned, a Node registered with that providerID (and its Instance,
// which the CSR approval would have made).
func provision(t *testing.T, name string) {
	t.Helper()
	ctx := framework.Context(t)
	sms := f.NM.InfrastructureV1alpha1().StaticMachines(ns)
	providerID := "static://" + name
	if _, err := sms.Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"providerID":%q}}`, providerID)), metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting the providerID of StaticMachine %s: %v", name, err)
	}
	if _, err := sms.Patch(ctx, name, types.MergePatchType,
		[]byte(`{"status":{"ready":true,"initialization":{"provisioned":true},"addresses":[{"type":"InternalIP","address":"192.0.2.20"}]}}`),
		metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("reporting StaticMachine %s provisioned: %v", name, err)
	}
	sm, err := sms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	group := sm.Labels[deckhousev1.NodeGroupLabel]
	node := framework.NewNode(name, group)
	node.Spec.ProviderID = providerID
	// Cluster API deletes the Node itself on scale-down: a deletion that
	// finds it gone is fine.
	if _, err := f.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering Node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// Ready, and kept so by its Lease, as its kubelet would: Cluster API
	// counts a Machine available, and a rolling update goes on, only once
	// its Node is.
	// (Its health is the kubelet's pressure conditions, all False.)
	now := metav1.Now()
	conditions := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		conditions = append(conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse, Reason: "KubeletHas" + "No" + string(c)})
	}
	for i := range conditions {
		conditions[i].LastHeartbeatTime, conditions[i].LastTransitionTime = now, now
	}
	ready, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conditions}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, ready, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("reporting Node %s Ready: %v", name, err)
	}
	hb, err := framework.StartHeartbeat(framework.Context(t), f.CP, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hb.Stop)
	// The Instance node-manager makes when it approves a joining node's
	// certificate: its own, so it also deletes it once the Node is gone.
	inst := framework.NewInstance(name, group)
	inst.Labels[deckhousev1.ManagedByLabel] = deckhousev1.NodeManagerControllerName
	if _, err := f.NM.DeckhouseV1alpha1().Instances().Create(ctx, inst, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Instance %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().Instances().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// setNodeReady reports the Node Ready or not, as its kubelet would.
func setNodeReady(t *testing.T, name string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	setNodeCondition(t, name, status)
}

// setNodeCondition sets the Node's Ready condition to status (Unknown: as
// the node controller reports a node whose kubelet stopped reporting).
func setNodeCondition(t *testing.T, name string, status corev1.ConditionStatus) {
	t.Helper()
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Kube.CoreV1().Nodes().Patch(framework.Context(t), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("reporting Node %s Ready=%s: %v", name, status, err)
	}
}

func patchGroup(t *testing.T, group, patch string) {
	t.Helper()
	if _, err := f.NM.DeckhouseV1().NodeGroups().Patch(framework.Context(t), group, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching NodeGroup %s with %s: %v", group, patch, err)
	}
}

// get reads a Cluster API object of resource in ns into out.
func get(ctx context.Context, resource, name string, out any) bool {
	u, err := dyn.Resource(clusterv1.GroupVersion.WithResource(resource)).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	return err == nil && runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out) == nil
}

func listMachines(ctx context.Context, t *testing.T) []clusterv1.Machine {
	l, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machines")).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := make([]clusterv1.Machine, 0, len(l.Items))
	for _, u := range l.Items {
		var m clusterv1.Machine
		if err := fromUnstructured(u, &m); err != nil {
			t.Errorf("reading Machine %s: %v", u.GetName(), err)
			continue
		}
		out = append(out, m)
	}
	return out
}

func fromUnstructured(u unstructured.Unstructured, out any) error {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
