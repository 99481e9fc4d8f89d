package staticmachines

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	infralisters "github.com/node-manager/node-manager/generated/listers/infrastructure/v1alpha1"
)

// A Node joined by hand (no providerID) queues the machine of the bound
// instance at its address, so an adoption that went Running before the
// Node reached the informer still gives the Node its providerID.
func TestANodeWithoutProviderIDQueuesTheMachineAdoptingItsAddress(t *testing.T) {
	instances := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byInstance: instanceAddress})
	bound := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: "host-2"},
		Spec:   deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.2"},
		Status: deckhousev1alpha2.StaticInstanceStatus{MachineRef: &corev1.ObjectReference{Namespace: "ns", Name: "m-2"}}}
	free := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: "host-3"},
		Spec: deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.3"}}
	machines := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	withID := &infrav1alpha1.StaticMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-1"},
		Spec: infrav1alpha1.StaticMachineSpec{ProviderID: infrav1alpha1.ProviderIDPrefix + "ns/host-1"}}
	for _, err := range []error{instances.Add(bound), instances.Add(free), machines.Add(withID)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	c := &Controller{atAddress: instances, machines: infralisters.NewStaticMachineLister(machines)}
	node := func(providerID, ip string) *corev1.Node {
		return &corev1.Node{Spec: corev1.NodeSpec{ProviderID: providerID},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"adopted, at a bound instance's address", node("", "10.0.0.2"), machinePrefix + "ns/m-2"},
		{"joined by hand, at a free instance's address", node("", "10.0.0.3"), ""},
		{"joined by hand, no instance", node("", "10.0.0.9"), ""},
		{"the machine's providerID", node(withID.Spec.ProviderID, "10.0.0.1"), machinePrefix + "ns/m-1"},
		{"another provider's", node("aws:///i-1", "10.0.0.2"), ""},
	} {
		if got := c.nodeMachine(tc.node); got != tc.want {
			t.Errorf("%s: queued %q, want %q", tc.name, got, tc.want)
		}
	}
}
