package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
)

// rolloutGroup is the group the rollout is measured on; it holds a fifth
// of the fleet (1,000 of 5,000 nodes), the other groups share the rest.
const rolloutGroup = "rollout"

// layout is the fleet's shape: which group each node is in.
type layout struct {
	groups []string
	// members lists each group's nodes.
	members map[string][]string
	nodes   []fleetNode
}

type fleetNode struct{ name, group string }

// newLayout puts nodes/5 nodes in the rollout group and spreads the rest
// over groups-1 worker groups.
func newLayout(nodes, groups int) layout {
	l := layout{members: map[string][]string{}}
	l.groups = append(l.groups, rolloutGroup)
	for i := 1; i < groups; i++ {
		l.groups = append(l.groups, fmt.Sprintf("fleet-%02d", i))
	}
	rollout := nodes / 5
	for i := range nodes {
		g := rolloutGroup
		if i >= rollout {
			g = l.groups[1+(i-rollout)%(groups-1)]
		}
		n := fleetNode{name: fmt.Sprintf("node-%05d", i), group: g}
		l.nodes = append(l.nodes, n)
		l.members[g] = append(l.members[g], n.name)
	}
	return l
}

// stepName is the NodeGroupConfiguration that selects only group.
func stepName(group string) string { return group + "-step.sh" }

// createGroups creates the NodeGroups (the rollout group with
// update.maxConcurrent 10%), one step selecting all groups and one step per
// group (the one a change of that group edits).
func createGroups(ctx context.Context, nm versioned.Interface, l layout) error {
	for _, g := range l.groups {
		ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: g},
			Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
		if g == rolloutGroup {
			ng.Spec.Update = &deckhousev1.UpdateSpec{MaxConcurrent: ptr.To(intstr.FromString("10%"))}
		}
		if _, err := nm.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create NodeGroup %s: %w", g, err)
		}
	}
	steps := []*deckhousev1alpha1.NodeGroupConfiguration{ngc("all-groups.sh", []string{"*"}, "echo every group\n")}
	for _, g := range l.groups {
		steps = append(steps, ngc(stepName(g), []string{g}, "echo "+g+"\n"))
	}
	for _, s := range steps {
		if _, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create NodeGroupConfiguration %s: %w", s.Name, err)
		}
	}
	return nil
}

func ngc(name string, groups []string, content string) *deckhousev1alpha1.NodeGroupConfiguration {
	return &deckhousev1alpha1.NodeGroupConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: deckhousev1alpha1.NodeGroupConfigurationSpec{Weight: 200, NodeGroups: groups, Bundles: []string{"*"},
			Content: content + strings.Repeat("# padding line of a realistic step\n", 40)}}
}

// changeStep edits the step of one NodeGroupConfiguration, so the groups
// it selects get a new checksum.
func changeStep(ctx context.Context, nm versioned.Interface, name, marker string) error {
	c, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get NodeGroupConfiguration %s: %w", name, err)
	}
	c.Spec.Content += "# " + marker + "\n"
	if _, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update NodeGroupConfiguration %s: %w", name, err)
	}
	return nil
}

// createNodes creates each node's Instance, Node (converged on its group's
// checksum, Ready, as a joined node reports) and Lease, with workers
// concurrent writers.
func createNodes(ctx context.Context, kube kubernetes.Interface, nm versioned.Interface, l layout, checksums map[string]string, workers int) error {
	return parallel(ctx, workers, len(l.nodes), func(ctx context.Context, i int) error {
		n := l.nodes[i]
		labels := map[string]string{deckhousev1.NodeGroupLabel: n.group}
		if _, err := nm.DeckhouseV1alpha1().Instances().Create(ctx,
			&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Instance %s: %w", n.name, err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels,
			Annotations: map[string]string{deckhousev1.ConfigurationChecksumAnnotation: checksums[n.group]}}}
		created, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create Node %s: %w", n.name, err)
		}
		now := metav1.Now()
		status, err := json.Marshal(map[string]any{"status": corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "SimulatedKubelet",
				LastHeartbeatTime: now, LastTransitionTime: now}},
			NodeInfo:    corev1.NodeSystemInfo{KubeletVersion: "v1.36.3"},
			Capacity:    resources(),
			Allocatable: resources(),
		}})
		if err != nil {
			return err
		}
		if _, err := kube.CoreV1().Nodes().Patch(ctx, n.name, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("report Node %s Ready: %w", n.name, err)
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.name, UID: created.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.name), LeaseDurationSeconds: ptr.To(int32(40)),
				RenewTime: &metav1.MicroTime{Time: time.Now()}}}
		if _, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Lease %s: %w", n.name, err)
		}
		return nil
	})
}

func resources() corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
}

// leasePasses records how long the renewals' passes over every node's
// Lease take: a pass longer than kube-controller-manager's grace period
// (50 s) means nodes are marked NotReady.
type leasePasses struct{ last, longest atomic.Int64 }

func (p *leasePasses) done(took time.Duration) {
	p.last.Store(int64(took))
	if int64(took) > p.longest.Load() {
		p.longest.Store(int64(took))
	}
}

func (p *leasePasses) String() string {
	return fmt.Sprintf("last Lease pass %s, longest %s", time.Duration(p.last.Load()).Round(time.Second), time.Duration(p.longest.Load()).Round(time.Second))
}

// renewLeases renews every node's Lease once per every, spread evenly, as
// the kubelets would (kube-controller-manager's node lifecycle controller
// marks a node whose Lease is not renewed within 50 s NotReady). It runs
// in both the quiet and the loaded phases, so it cancels out of the
// fleet's extra CPU. At most 8 renewals are in flight: when kube-apiserver
// answers slower than 8 per gap, the passes take longer than every, and
// passes records by how much.
func renewLeases(ctx context.Context, kube kubernetes.Interface, l layout, every time.Duration, passes *leasePasses) {
	leases := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	gap := every / time.Duration(len(l.nodes))
	tick := time.NewTicker(gap)
	defer tick.Stop()
	sem := make(chan struct{}, 8)
	passStart := time.Now()
	for i := 0; ; i = (i + 1) % len(l.nodes) {
		if i == 0 {
			passes.done(time.Since(passStart))
			passStart = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		name := l.nodes[i].name
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		go func() {
			defer func() { <-sem }()
			renew := metav1.MicroTime{Time: time.Now()}
			patch := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, renew.Format(metav1.RFC3339Micro))
			_, _ = leases.Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
		}()
	}
}

// allowConfigMapRead lets every node read the comparison ConfigMap, so the
// ConfigMap GETs pass the same authorizers (Node, then RBAC) as a node's
// GET of its bashibles does.
func allowConfigMapRead(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "bench-fleet-read", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name}, Verbs: []string{"get"}}}}
	if _, err := kube.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Role %s: %w", role.Name, err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-fleet-read", Namespace: namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}}}
	if _, err := kube.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create RoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

// parallel runs do(i) for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(ctx context.Context, workers, n int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return first
}
