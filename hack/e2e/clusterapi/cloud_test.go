package clusterapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/bootstraptokens"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/shelltest"
)

// cloudZones are the installation's zones (--cloud-zones).
var cloudZones = []string{"z1", "z2"}

// groupMDs lists group's MachineDeployments by zone.
func groupMDs(ctx context.Context, t *testing.T, group string) map[string]clusterv1.MachineDeployment {
	l, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{deckhousev1.NodeGroupLabel: group}).String()})
	if err != nil {
		return nil
	}
	out := map[string]clusterv1.MachineDeployment{}
	for _, u := range l.Items {
		var md clusterv1.MachineDeployment
		if err := fromUnstructured(u, &md); err != nil {
			t.Errorf("reading MachineDeployment %s: %v", u.GetName(), err)
			continue
		}
		if md.DeletionTimestamp == nil {
			out[md.Annotations[deckhousev1.CloudZoneAnnotation]] = md
		}
	}
	return out
}

// groupMachines lists group's Machines.
func groupMachines(ctx context.Context, t *testing.T, group string) []clusterv1.Machine {
	return slices.DeleteFunc(listMachines(ctx, t), func(m clusterv1.Machine) bool { return m.Labels[deckhousev1.NodeGroupLabel] != group })
}

// TestCloudEphemeralGroupGetsMachinesPerZoneThroughClusterAPI: a
// CloudEphemeral group of two zones, minPerZone = maxPerZone = 1, whose
// class is a machine template of the provider (CAPS's StaticMachineTemplate
// here, the test playing its controller), gets a MachineDeployment per zone
// with the autoscaler's sizes, a copy of its class, its bootstrap data and
// the zone as failure domain; Cluster API makes one Machine per zone, each
// joined and linked to its Instance. A change of the class rolls each
// zone's machine, one new before the old goes (maxSurgePerZone 1,
// maxUnavailablePerZone 0). With maxPerZone 3, a scale by the autoscaler
// within the sizes stays, shows in the group's status, and one beyond them
// is refused at the API;
// without the group, its MachineDeployments, copies and bootstrap data go.
func TestCloudEphemeralGroupGetsMachinesPerZoneThroughClusterAPI(t *testing.T) {
	const group, className = "capi-cloud", "capi-cloud-small"
	ctx := framework.Context(t)
	templates := f.NM.InfrastructureV1alpha1().StaticMachineTemplates(ns)
	// The class says what its machines have, for the autoscaler to scale a
	// zone from zero.
	class := &infrav1alpha1.StaticMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: className, Annotations: map[string]string{
		deckhousev1.AutoscalerCapacityPrefix + "cpu": "2", deckhousev1.AutoscalerCapacityPrefix + "memory": "4Gi"}},
		Spec: infrav1alpha1.StaticMachineTemplateSpec{Template: infrav1alpha1.StaticMachineTemplateResource{
			Spec: infrav1alpha1.StaticMachineTemplateResourceSpec{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"size": "small"}}}}}}
	if _, err := templates.Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = templates.Delete(context.Background(), className, metav1.DeleteOptions{}) })
	f.TestGroup(t, framework.NewGroup(group, func(ng *deckhousev1.NodeGroup) {
		ng.Spec.NodeType = deckhousev1.NodeTypeCloudEphemeral
		ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{
			ClassReference: deckhousev1.ClassReference{Kind: "StaticMachineTemplate", Name: className}, MinPerZone: 1, MaxPerZone: 1,
			Priority: new(int32(5))}
		ng.Spec.NodeTemplate = &deckhousev1.NodeTemplate{Labels: map[string]string{"tier": "web"},
			Taints: []deckhousev1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}}
	}))
	playProviderCluster(t)

	// A MachineDeployment per zone, shaped for the autoscaler.
	var copies []string
	framework.Poll(t, "a MachineDeployment of 1 per zone, from a copy of the class, with the group's bootstrap data", func(ctx context.Context) (bool, error) {
		mds := groupMDs(ctx, t, group)
		if len(mds) != len(cloudZones) {
			return false, nil
		}
		copies = nil
		for _, zone := range cloudZones {
			md, ok := mds[zone]
			if !ok {
				return false, nil
			}
			s := md.Spec.Template.Spec
			if *md.Spec.Replicas != 1 || md.Annotations[clusterv1.AutoscalerMinSizeAnnotation] != "1" || md.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] != "1" ||
				s.FailureDomain != zone || *s.Bootstrap.DataSecretName != bootstraptokens.BootstrapDataSecretName(group) || s.InfrastructureRef.Kind != "StaticMachineTemplate" {
				return false, fmt.Errorf("MachineDeployment %s of zone %s: replicas %d, annotations %v, machine spec %+v", md.Name, zone, *md.Spec.Replicas, md.Annotations, s)
			}
			// What a node of the zone will be, in the autoscaler's formats.
			capacity := map[string]string{"cpu": "2", "memory": "4Gi", "taints": "dedicated=web:NoSchedule",
				"labels": deckhousev1.NodeRoleLabelPrefix + group + "=," + deckhousev1.NodeGroupLabel + "=" + group + "," + deckhousev1.NodeTypeLabel + "=CloudEphemeral,tier=web"}
			for k, v := range capacity {
				if got := md.Annotations[deckhousev1.AutoscalerCapacityPrefix+k]; got != v {
					return false, fmt.Errorf("MachineDeployment %s: annotation %s%s is %q, want %q", md.Name, deckhousev1.AutoscalerCapacityPrefix, k, got, v)
				}
			}
			tpl, err := templates.Get(ctx, s.InfrastructureRef.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if tpl.Spec.Template.Spec.LabelSelector.MatchLabels["size"] != "small" || tpl.Labels[deckhousev1.NodeGroupLabel] != group {
				return false, fmt.Errorf("the copy %s of the class: %+v", tpl.Name, tpl)
			}
			copies = append(copies, tpl.Name)
		}
		return true, nil
	})

	// The priority expander's configuration lists the group's
	// MachineDeployments, as the autoscaler names them, at its priority.
	framework.Poll(t, "the priority expander's ConfigMap with the group at priority 5", func(ctx context.Context) (bool, error) {
		cm, err := f.Kube.CoreV1().ConfigMaps(ns).Get(ctx, deckhousev1.AutoscalerPriorityExpanderConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		var priorities map[int][]string
		if err := yaml.Unmarshal([]byte(cm.Data[deckhousev1.AutoscalerPrioritiesKey]), &priorities); err != nil || len(priorities[5]) != 1 {
			return false, fmt.Errorf("priorities %q: %v", cm.Data[deckhousev1.AutoscalerPrioritiesKey], err)
		}
		re, err := regexp.Compile(priorities[5][0])
		if err != nil {
			return false, err
		}
		for _, md := range groupMDs(ctx, t, group) {
			if !re.MatchString("MachineDeployment/" + ns + "/" + md.Name) {
				return false, fmt.Errorf("priority 5's %s does not match MachineDeployment %s", priorities[5][0], md.Name)
			}
		}
		return true, nil
	})

	// The bootstrap data the Machines name, in Cluster API's form, written
	// by the controller as its ServiceAccount under the Secrets policy.
	framework.Poll(t, "Secret "+bootstraptokens.BootstrapDataSecretName(group)+" in Cluster API's form", func(ctx context.Context) (bool, error) {
		s, err := f.Kube.CoreV1().Secrets(ns).Get(ctx, bootstraptokens.BootstrapDataSecretName(group), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return string(s.Data[infrav1alpha1.BootstrapDataFormatKey]) == deckhousev1.ManualBootstrapCloudConfigKey &&
			strings.HasPrefix(string(s.Data[infrav1alpha1.ClusterSecretValueKey]), "#cloud-config\n"), nil
	})
	if _, err := f.Kube.CoreV1().Secrets(ns).Get(ctx, bootstraptokens.SecretName(group), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("CloudEphemeral group %s: want no manual-bootstrap Secret, got %v", group, err)
	}
	runBootstrapData(t, group)

	// One Machine per zone, each joined (the test plays the provider and
	// the kubelet) and linked to its Instance.
	provisionNew := func(ctx context.Context, seen map[string]bool) (int, error) {
		n := 0
		for _, m := range groupMachines(ctx, t, group) {
			if seen[string(m.UID)] || m.Spec.InfrastructureRef.Name == "" {
				continue
			}
			if _, err := f.NM.InfrastructureV1alpha1().StaticMachines(ns).Get(ctx, m.Spec.InfrastructureRef.Name, metav1.GetOptions{}); err != nil {
				continue
			}
			seen[string(m.UID)] = true
			provision(t, m.Spec.InfrastructureRef.Name)
			n++
		}
		return n, nil
	}
	seen := map[string]bool{}
	framework.Poll(t, "a Machine in each zone, provisioned", func(ctx context.Context) (bool, error) {
		_, err := provisionNew(ctx, seen)
		return len(seen) == len(cloudZones), err
	})
	waitRunning(t, group, len(cloudZones))
	zonesOf := func(ms []clusterv1.Machine) []string {
		var zones []string
		for _, m := range ms {
			zones = append(zones, m.Spec.FailureDomain)
		}
		slices.Sort(zones)
		return zones
	}
	if got := zonesOf(groupMachines(ctx, t, group)); !slices.Equal(got, cloudZones) {
		t.Errorf("the Machines' failure domains: %v, want one in each of %v", got, cloudZones)
	}

	// A change of the class rolls each zone: the MachineDeployments move to
	// new copies, Cluster API makes the new Machine first (surge 1,
	// unavailable 0) and removes the old one once the new one runs.
	old := map[string]bool{}
	for _, m := range groupMachines(ctx, t, group) {
		old[m.Name] = true
	}
	if _, err := templates.Patch(ctx, className, types.MergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"labelSelector":{"matchLabels":{"size":"large"}}}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the class's change rolled: a new Machine per zone running, the old ones gone, never more than 2 per zone", func(ctx context.Context) (bool, error) {
		ms := groupMachines(ctx, t, group)
		perZone := map[string]int{}
		for _, m := range ms {
			perZone[m.Spec.FailureDomain]++
			if perZone[m.Spec.FailureDomain] > 2 {
				return false, fmt.Errorf("zone %s has %d Machines during the roll; maxSurgePerZone 1 allows 2", m.Spec.FailureDomain, perZone[m.Spec.FailureDomain])
			}
		}
		if _, err := provisionNew(ctx, seen); err != nil {
			return false, err
		}
		for _, m := range ms {
			if old[m.Name] || m.Status.Phase != string(clusterv1.MachinePhaseRunning) {
				return false, nil
			}
		}
		return len(ms) == len(cloudZones), nil
	}, func() string { return describeMachines(t, group) })
	for zone, md := range groupMDs(ctx, t, group) {
		if slices.Contains(copies, md.Spec.Template.Spec.InfrastructureRef.Name) {
			t.Errorf("zone %s's MachineDeployment still clones %s after the class changed", zone, md.Spec.Template.Spec.InfrastructureRef.Name)
		}
	}
	// The superseded copies go once no MachineSet clones from them.
	framework.Poll(t, "the superseded copies of the class deleted", func(ctx context.Context) (bool, error) {
		for _, name := range copies {
			if _, err := templates.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})

	// Sizes: the autoscaler scales within [min, max] through the scale
	// subresource; a scale beyond max is brought back to it.
	patchGroup(t, group, `{"spec":{"cloudInstances":{"maxPerZone":3}}}`)
	framework.Poll(t, "the MachineDeployments' max size 3", func(ctx context.Context) (bool, error) {
		mds := groupMDs(ctx, t, group)
		for _, md := range mds {
			if md.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] != "3" {
				return false, nil
			}
		}
		return len(mds) == len(cloudZones), nil
	})
	scale := func(name string, replicas int) error {
		_, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(ns).Patch(ctx, name, types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{FieldManager: "cluster-autoscaler"}, "scale")
		return err
	}
	z1 := groupMDs(ctx, t, group)["z1"].Name
	// Each scale is a change of the MachineDeployment, which node-manager
	// looks at again.
	if err := scale(z1, 2); err != nil {
		t.Fatalf("scaling MachineDeployment %s to 2 as the autoscaler: %v", z1, err)
	}
	framework.Poll(t, "a Machine added in zone z1 by the autoscaler's scale to 2, kept", func(ctx context.Context) (bool, error) {
		if _, err := provisionNew(ctx, seen); err != nil {
			return false, err
		}
		n := 0
		for _, m := range groupMachines(ctx, t, group) {
			if m.Spec.FailureDomain == "z1" && m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
				n++
			}
		}
		return n == 2 && *ptrReplicas(groupMDs(ctx, t, group)["z1"]) == 2, nil
	}, func() string { return describeMachines(t, group) })
	// The group's status counts the MachineDeployments' replicas, its sizes
	// the installation's two zones (the group names none).
	framework.Poll(t, "status desired 3, min 2, max 6, Scaling False", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := ng.Status
		sc := meta.FindStatusCondition(st.Conditions, "Scaling")
		return ptr.Deref(st.Desired, -1) == 3 && ptr.Deref(st.Min, -1) == 2 && ptr.Deref(st.Max, -1) == 6 &&
			st.Engine == deckhousev1.NodeGroupEngineCAPI && sc != nil && sc.Status == metav1.ConditionFalse, nil
	}, func() string {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(context.Background(), group, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		b, _ := json.Marshal(ng.Status)
		insts, _ := f.NM.DeckhouseV1alpha1().Instances().List(context.Background(), metav1.ListOptions{})
		for _, i := range insts.Items {
			_, err := f.Kube.CoreV1().Nodes().Get(context.Background(), i.Name, metav1.GetOptions{})
			b = fmt.Appendf(b, "; Instance %s labels %v nodeRef %v deleting %v finalizers %v node: %v", i.Name, i.Labels, i.Status.NodeRef, i.DeletionTimestamp, i.Finalizers, err)
		}
		return string(b) + "; " + describeMachines(t, group)
	})
	// Standby: one spare node (of max 6), held by a pod asking half a
	// node of the class (2 CPUs, 4Gi), written by the controller as its
	// ServiceAccount under the Deployments policy.
	patchGroup(t, group, `{"spec":{"cloudInstances":{"standby":1,"standbyHolder":{"overprovisioningRate":50}}}}`)
	holder := deckhousev1.StandbyHolderPrefix + group
	framework.Poll(t, "the standby holder "+holder+": 1 pod of 1 CPU and 2Gi at the standby priority", func(ctx context.Context) (bool, error) {
		d, err := f.Kube.AppsV1().Deployments(ns).Get(ctx, holder, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		p := d.Spec.Template.Spec
		req := p.Containers[0].Resources.Requests
		return ptr.Deref(d.Spec.Replicas, 0) == 1 && req.Cpu().String() == "1" && req.Memory().String() == "2Gi" &&
			p.PriorityClassName == deckhousev1.StandbyPriorityClass && p.NodeSelector[deckhousev1.NodeGroupLabel] == group, nil
	})
	// Its pod, once on a node of the group and Ready (the test plays the
	// scheduler and the kubelet), is the group's status.standby.
	framework.Poll(t, "the standby holder's pod, bound to a node of the group and Ready; status.standby 1", func(ctx context.Context) (bool, error) {
		pods, err := f.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=" + group})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				nodeName := groupMachines(ctx, t, group)[0].Status.NodeRef.Name
				if err := f.Kube.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
					Target: corev1.ObjectReference{Kind: "Node", Name: nodeName}}, metav1.CreateOptions{}); err != nil {
					return false, err
				}
				continue
			}
			if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue }) {
				now := metav1.Now()
				p.Status.Phase = corev1.PodRunning
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}}
				if _, err := f.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
					return false, err
				}
			}
		}
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		return err == nil && ng.Status.Standby == 1, err
	})
	// The controller's token writes no other Deployment.
	tok, err := f.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, deckhousev1.NodeManagerControllerName, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	asController := kubernetes.NewForConfigOrDie(&rest.Config{Host: f.CP.APIServerURL, BearerToken: tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.CP.CACertPEM()}})
	forged, err := f.Kube.AppsV1().Deployments(ns).Get(ctx, holder, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string]struct {
		change func(*appsv1.Deployment)
		want   string
	}{
		"another image": {func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "busybox" }, "pinned pause image"},
		"a token":       {func(d *appsv1.Deployment) { d.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(true) }, "no ServiceAccount token"},
		"another name":  {func(d *appsv1.Deployment) { d.Name = "evil" }, "only the standby holders"},
		"a host port": {func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 6443, HostPort: 6443}}
		}, "no ports, probes or hooks"},
		"another component's label": {func(d *appsv1.Deployment) { d.Spec.Template.Labels["component"] = deckhousev1.BashibleAPIServerName }, "only its own labels"},
	} {
		d := forged.DeepCopy()
		d.ResourceVersion, d.UID = "", ""
		d.Name += "-forged"
		c.change(d)
		_, err := asController.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("node-manager-controller's token creating a Deployment with %s: %v, want a refusal saying %q", what, err, c.want)
		}
	}

	// Beyond the sizes, the scale is refused at the API (the policy
	// reads them from the MachineDeployment), through the scale
	// subresource as through an edit of the MachineDeployment.
	for _, replicas := range []int{4, 0} {
		err := scale(z1, replicas)
		if err == nil || !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "PerZone") {
			t.Errorf("a scale of %s to %d, outside minPerZone 1 and maxPerZone 3: %v, want a refusal naming the group's size", z1, replicas, err)
		}
	}
	_, err = dyn.Resource(clusterv1.GroupVersion.WithResource("machinedeployments")).Namespace(ns).Patch(ctx, z1, types.MergePatchType,
		[]byte(`{"spec":{"replicas":7}}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "maxPerZone") {
		t.Errorf("an edit of MachineDeployment %s to 7 replicas: %v, want a refusal", z1, err)
	}
	if got := *ptrReplicas(groupMDs(ctx, t, group)["z1"]); got != 2 {
		t.Errorf("after the refused scales, zone z1's MachineDeployment has %d replicas, want 2", got)
	}
	// To the maximum and back, as the autoscaler scales: both kept.
	runningIn := func(ctx context.Context, zone string) (running, all int) {
		for _, m := range groupMachines(ctx, t, group) {
			if m.Spec.FailureDomain == zone {
				all++
				if m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.DeletionTimestamp == nil {
					running++
				}
			}
		}
		return running, all
	}
	for _, n := range []int{3, 2} {
		if err := scale(z1, n); err != nil {
			t.Fatalf("scaling MachineDeployment %s to %d as the autoscaler: %v", z1, n, err)
		}
		framework.Poll(t, fmt.Sprintf("zone z1 scaled to %d by the autoscaler, kept", n), func(ctx context.Context) (bool, error) {
			if _, err := provisionNew(ctx, seen); err != nil {
				return false, err
			}
			running, all := runningIn(ctx, "z1")
			return running == n && all == n && *ptrReplicas(groupMDs(ctx, t, group)["z1"]) == int32(n), nil
		}, func() string { return describeMachines(t, group) })
	}

	// Chaos: due (the last victim recorded two periods ago) while a node is
	// not Ready, it holds back and says why; once the node is Ready again,
	// one machine goes, and no second one within the period although the
	// group is whole again with its replacement.
	ms := groupMachines(ctx, t, group)
	if len(ms) != 3 {
		t.Fatalf("before chaos: %d Machines of the group, want 3; %s", len(ms), describeMachines(t, group))
	}
	sick := ms[0].Status.NodeRef.Name
	setNodeReady(t, sick, false)
	before := map[string]bool{}
	for _, m := range ms {
		before[m.Name] = true
	}
	patchGroup(t, group, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"chaos":{"mode":"DrainAndDelete","period":"1m"}}}`,
		deckhousev1.ChaosLastVictimAnnotation, time.Now().Add(-2*time.Minute).UTC().Format(time.RFC3339)))
	f.WaitEventNote(t, group, "ChaosMonkeyHeld", "the node of machine "+ms[0].Name+" is not Ready")
	if n := len(groupMachines(ctx, t, group)); n != 3 || slices.ContainsFunc(groupMachines(ctx, t, group), func(m clusterv1.Machine) bool { return m.DeletionTimestamp != nil }) {
		t.Fatalf("chaos deleted a machine of a group with a node not Ready: %s", describeMachines(t, group))
	}
	setNodeReady(t, sick, true)
	note := f.WaitEventNote(t, group, "ChaosMonkeyVictim", "")
	chaosCount := func(ctx context.Context) string {
		_, body, err := controller.Get(ctx, "/metrics")
		if err != nil {
			return err.Error()
		}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, `node_manager_chaos_deleted_machines_total{node_group="`+group+`"}`) {
				return strings.Fields(line)[1]
			}
		}
		return "none"
	}
	framework.Poll(t, "a replacement for chaos's victim ("+note+"), Running", func(ctx context.Context) (bool, error) {
		if _, err := provisionNew(ctx, seen); err != nil {
			return false, err
		}
		ms := groupMachines(ctx, t, group)
		fresh := 0
		for _, m := range ms {
			if !before[m.Name] && m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
				fresh++
			}
		}
		return len(ms) == 3 && fresh == 1, nil
	}, func() string { return describeMachines(t, group) })
	waitRunning(t, group, 3)
	if got := chaosCount(ctx); got != "1" {
		t.Errorf("node_manager_chaos_deleted_machines_total of %s: %s right after the replacement, want 1 (one victim per 1m period)", group, got)
	}
	if n := len(f.EventNotes(t, group, "ChaosMonkeyVictim")); n != 1 {
		t.Errorf("%d ChaosMonkeyVictim Events within the period, want 1", n)
	}

	// approvalMode RollingUpdate: a node asking for a disruptive update (as
	// bashible asks) is approved by update approval, which marks it for
	// replacement; its zone's MachineDeployment rolls: a new machine first,
	// and the old one drained and deleted only once the new one runs.
	patchGroup(t, group, `{"spec":{"chaos":{"mode":"Disabled"},"disruptions":{"approvalMode":"RollingUpdate"}}}`)
	var replaced clusterv1.Machine
	for _, m := range groupMachines(ctx, t, group) {
		if m.Spec.FailureDomain == "z2" {
			replaced = m
		}
	}
	oldNode := replaced.Status.NodeRef.Name
	if _, err := f.Kube.CoreV1().Nodes().Patch(ctx, oldNode, types.MergePatchType, fmt.Appendf(nil,
		`{"metadata":{"annotations":{%q:"",%q:""}}}`, deckhousev1.WaitingForApprovalAnnotation, deckhousev1.DisruptionRequiredAnnotation), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitEventNote(t, oldNode, "ReplacementStarted", "")
	framework.Poll(t, "a new Machine in zone z2 while "+replaced.Name+" still runs, then Running", func(ctx context.Context) (bool, error) {
		ms := groupMachines(ctx, t, group)
		var fresh *clusterv1.Machine
		var was *clusterv1.Machine
		for i, m := range ms {
			switch {
			case m.UID == replaced.UID:
				was = &ms[i]
			case m.Spec.FailureDomain == "z2" && m.DeletionTimestamp == nil:
				fresh = &ms[i]
			}
		}
		freshRunning := fresh != nil && fresh.Status.Phase == string(clusterv1.MachinePhaseRunning)
		if !freshRunning && (was == nil || was.DeletionTimestamp != nil) {
			return false, fmt.Errorf("Machine %s is being deleted (or gone) before its successor runs", replaced.Name)
		}
		if _, err := provisionNew(ctx, seen); err != nil {
			return false, err
		}
		return freshRunning, nil
	}, func() string { return describeMachines(t, group) })
	framework.Poll(t, "the replaced Machine "+replaced.Name+" and its Node "+oldNode+" gone", func(ctx context.Context) (bool, error) {
		for _, m := range groupMachines(ctx, t, group) {
			if m.UID == replaced.UID {
				return false, nil
			}
		}
		_, err := f.Kube.CoreV1().Nodes().Get(ctx, oldNode, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, func() string { return describeMachines(t, group) })

	// Two of the three nodes lost at once: more than the health check's
	// 40%, an outage rather than dead machines. Both are listed in the
	// group's lastMachineFailures, and none is replaced.
	ms = groupMachines(ctx, t, group)
	slices.SortFunc(ms, func(a, b clusterv1.Machine) int { return strings.Compare(a.Name, b.Name) })
	for _, m := range ms[:2] {
		setNodeCondition(t, m.Status.NodeRef.Name, corev1.ConditionUnknown)
	}
	framework.Poll(t, "lastMachineFailures lists the two lost machines, and the health check allows no remediation", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var names []string
		for _, mf := range ng.Status.LastMachineFailures {
			if mf.LastOperation == nil || mf.LastOperation.State != "Failed" || mf.OwnerRef == "" {
				return false, fmt.Errorf("failure %+v", mf)
			}
			names = append(names, mf.Name)
		}
		if !slices.Equal(names, []string{ms[0].Name, ms[1].Name}) {
			return false, nil
		}
		mhc, err := dyn.Resource(clusterv1.GroupVersion.WithResource("machinehealthchecks")).Namespace(ns).Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		allowed, found, _ := unstructured.NestedInt64(mhc.Object, "status", "remediationsAllowed")
		return found && allowed == 0, nil
	}, func() string { return describeMachines(t, group) })
	for _, m := range groupMachines(ctx, t, group) {
		if m.DeletionTimestamp != nil {
			t.Errorf("Machine %s is deleted although two of three machines were lost at once", m.Name)
		}
	}
	for _, m := range ms[:2] {
		setNodeCondition(t, m.Status.NodeRef.Name, corev1.ConditionTrue)
	}
	framework.Poll(t, "no lastMachineFailures once the nodes are back", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		return err == nil && len(ng.Status.LastMachineFailures) == 0, err
	})

	// One lost machine (its node's Ready Unknown: the kubelet stopped
	// reporting) is replaced by the group's MachineHealthCheck.
	lost := ms[2]
	setNodeCondition(t, lost.Status.NodeRef.Name, corev1.ConditionUnknown)
	framework.Poll(t, "the lost Machine "+lost.Name+" replaced: gone, and 3 Machines Running", func(ctx context.Context) (bool, error) {
		if _, err := provisionNew(ctx, seen); err != nil {
			return false, err
		}
		running := 0
		for _, m := range groupMachines(ctx, t, group) {
			if m.UID == lost.UID {
				return false, nil
			}
			if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
				running++
			}
		}
		return running == 3, nil
	}, func() string { return describeMachines(t, group) })

	// Without the group, its MachineDeployments and copies go, and with the
	// last cloud group the priority expander's ConfigMap.
	if err := f.NM.DeckhouseV1().NodeGroups().Delete(ctx, group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the group's MachineDeployments and copies of its class deleted with it", func(ctx context.Context) (bool, error) {
		if len(groupMDs(ctx, t, group)) != 0 {
			return false, nil
		}
		tpls, err := templates.List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=" + group})
		if err != nil {
			return false, err
		}
		for _, tpl := range tpls.Items {
			if tpl.DeletionTimestamp == nil {
				return false, nil
			}
		}
		_, err = templates.Get(ctx, className, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the class %s itself was deleted", className)
		}
		_, err = f.Kube.CoreV1().Secrets(ns).Get(ctx, bootstraptokens.BootstrapDataSecretName(group), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		if _, err = f.Kube.AppsV1().Deployments(ns).Get(ctx, holder, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		_, err = f.Kube.CoreV1().ConfigMaps(ns).Get(ctx, deckhousev1.AutoscalerPriorityExpanderConfigMap, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func ptrReplicas(md clusterv1.MachineDeployment) *int32 {
	if md.Spec.Replicas == nil {
		return new(int32(-1))
	}
	return md.Spec.Replicas
}

// describeMachines says what a failed wait saw of group's Machines and
// MachineDeployments.
func describeMachines(t *testing.T, group string) string {
	ctx := context.Background()
	var b strings.Builder
	for _, m := range groupMachines(ctx, t, group) {
		fmt.Fprintf(&b, "Machine %s (zone %s, %s, node %q, deleting %t): ", m.Name, m.Spec.FailureDomain, m.Status.Phase, m.Status.NodeRef.Name, m.DeletionTimestamp != nil)
		for _, c := range m.Status.Conditions {
			fmt.Fprintf(&b, "%s=%s(%s) ", c.Type, c.Status, c.Reason)
		}
		b.WriteString("; ")
	}
	for zone, md := range groupMDs(ctx, t, group) {
		fmt.Fprintf(&b, "MachineDeployment %s (zone %s): replicas %v, status %+v; ", md.Name, zone, ptrReplicas(md), md.Status)
	}
	return b.String()
}

// runBootstrapData runs the group's bootstrap data as cloud-init runs it on
// a new machine (it writes write_files, then runs runcmd), in a temporary
// root, against this control plane: the served bootstrap script fetches
// bashible.sh with the group's token and starts it, as a joining machine
// does (bashible then stops: the temporary root has no /etc/os-release to
// pick a bundle by).
func runBootstrapData(t *testing.T, group string) {
	t.Helper()
	ctx := framework.Context(t)
	secret, err := f.Kube.CoreV1().Secrets(ns).Get(ctx, bootstraptokens.BootstrapDataSecretName(group), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cc struct {
		WriteFiles []struct {
			Path, Encoding, Content string
		} `json:"write_files"`
		RunCmd [][]string `json:"runcmd"`
	}
	value := string(secret.Data[infrav1alpha1.ClusterSecretValueKey])
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(value, "#cloud-config\n")), &cc); err != nil {
		t.Fatalf("the bootstrap data is not a cloud-config: %v\n%s", err, value)
	}
	if len(cc.WriteFiles) != 1 || cc.WriteFiles[0].Encoding != "b64" || len(cc.RunCmd) != 1 ||
		!slices.Equal(cc.RunCmd[0], []string{"bash", cc.WriteFiles[0].Path}) {
		t.Fatalf("the bootstrap data writes %+v and runs %v; want one script written and run", cc.WriteFiles, cc.RunCmd)
	}
	script, err := base64.StdEncoding.DecodeString(cc.WriteFiles[0].Content)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	local := strings.TrimPrefix(f.CP.APIServerURL, "https://")
	out, code := shelltest.Run(t, filepath.Base(cc.WriteFiles[0].Path), string(script), "BASHIBLE_ROOT="+root, "BASHIBLE_API_ENDPOINTS="+local)
	t.Logf("the bootstrap data's script exited %d:\n%s", code, out)
	if !strings.Contains(out, "running the bootstrap script of group "+group+" served by "+local) {
		t.Errorf("the bootstrap data did not run the served bootstrap script of group %s", group)
	}
	dir := filepath.Join(root, "var/lib/bashible")
	served, err := f.NM.BashibleV1alpha1().Bootstraps().Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := framework.ReadFile(t, filepath.Join(dir, "bootstrap.sh")); got != served.Bootstrap {
		t.Errorf("var/lib/bashible/bootstrap.sh is not the served bootstrap/%s", group)
	}
	agent, err := f.NM.BashibleV1alpha1().Bashibles().Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := framework.ReadFile(t, filepath.Join(dir, "bashible.sh")); got != agent.Data["bashible.sh"] {
		t.Errorf("var/lib/bashible/bashible.sh is not the served bashibles/%s", group)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lock/bashible")); err != nil {
		t.Errorf("bashible.sh did not start (no lock file): %v", err)
	}
}
