package stack

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// PublishAPIEndpoints writes the default/kubernetes EndpointSlice that a
// real cluster's kube-apiserver maintains. The local kube-apiserver runs
// without an endpoint reconciler because its loopback address cannot be
// stored, so callers pass documentation addresses (192.0.2.0/24) that
// stand in for the control-plane nodes in rendered bundles.
func PublishAPIEndpoints(ctx context.Context, kube kubernetes.Interface, addresses ...string) error {
	endpoints := make([]discoveryv1.Endpoint, 0, len(addresses))
	for _, a := range addresses {
		endpoints = append(endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	_, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "node-manager-stack",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   endpoints,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("writing the default/kubernetes EndpointSlice: %w", err)
	}
	return nil
}
