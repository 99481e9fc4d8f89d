package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// NewGroup is a Static NodeGroup named name, changed by each mutation
// (nil ones are skipped).
func NewGroup(name string, mutations ...func(*deckhousev1.NodeGroup)) *deckhousev1.NodeGroup {
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	for _, mutate := range mutations {
		if mutate != nil {
			mutate(ng)
		}
	}
	return ng
}

// OfType is a NewGroup mutation that sets the node type; a CloudEphemeral
// group also gets the cloudInstances the CRD requires of it (a class no
// e2e suite ever orders).
func OfType(typ deckhousev1.NodeType) func(*deckhousev1.NodeGroup) {
	return func(ng *deckhousev1.NodeGroup) {
		ng.Spec.NodeType = typ
		if typ == deckhousev1.NodeTypeCloudEphemeral {
			ng.Spec.CloudInstances = &deckhousev1.CloudInstancesSpec{
				ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "small"},
				MaxPerZone:     1,
			}
		}
	}
}

// CreateGroup creates ng and returns the API's error as it is, so that
// callers can tell a refusal's kind; the group stays until deleted.
func (f *Framework) CreateGroup(ctx context.Context, ng *deckhousev1.NodeGroup) (*deckhousev1.NodeGroup, error) {
	return f.NM.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{})
}

// TestGroup creates ng for the test and deletes it when the test ends.
func (f *Framework) TestGroup(t testing.TB, ng *deckhousev1.NodeGroup) *deckhousev1.NodeGroup {
	t.Helper()
	groups := f.NM.DeckhouseV1().NodeGroups()
	return testObject(t, "NodeGroup", ng, groups.Create, groups.Delete)
}

// NewNode is a Node in group, or in none when group is "".
func NewNode(name, group string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if group != "" {
		n.Labels[deckhousev1.NodeGroupLabel] = group
	}
	return n
}

// TestNode creates node for the test and deletes it when the test ends.
func (f *Framework) TestNode(t testing.TB, node *corev1.Node) *corev1.Node {
	t.Helper()
	nodes := f.Kube.CoreV1().Nodes()
	return testObject(t, "Node", node, nodes.Create, nodes.Delete)
}

// NewInstance is the Instance node-manager writes when it approves a
// joining node's certificate, in group, or in none when group is "".
func NewInstance(name, group string) *deckhousev1alpha1.Instance {
	inst := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if group != "" {
		inst.Labels = map[string]string{deckhousev1.NodeGroupLabel: group}
	}
	return inst
}

// TestInstance creates inst for the test and deletes it when the test ends.
func (f *Framework) TestInstance(t testing.TB, inst *deckhousev1alpha1.Instance) *deckhousev1alpha1.Instance {
	t.Helper()
	instances := f.NM.DeckhouseV1alpha1().Instances()
	return testObject(t, "Instance", inst, instances.Create, instances.Delete)
}

// TestConfiguration creates a NodeGroupConfiguration for the test and
// deletes it when the test ends.
func (f *Framework) TestConfiguration(t testing.TB, name string, spec deckhousev1alpha1.NodeGroupConfigurationSpec) *deckhousev1alpha1.NodeGroupConfiguration {
	t.Helper()
	configurations := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations()
	ngc := &deckhousev1alpha1.NodeGroupConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	return testObject(t, "NodeGroupConfiguration", ngc, configurations.Create, configurations.Delete)
}

// testObject creates obj of kind for the test with create, failing the
// test when the API refuses, and deletes it with del when the test ends.
func testObject[T metav1.Object](t testing.TB, kind string, obj T,
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	del func(context.Context, string, metav1.DeleteOptions) error,
) T {
	t.Helper()
	created, err := create(Context(t), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", kind, obj.GetName(), err)
	}
	t.Cleanup(func() { _ = del(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	return created
}
