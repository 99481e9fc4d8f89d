package stack

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-manager/node-manager/hack/controlplane"
)

// PublishAPIEndpoints writes the default/kubernetes EndpointSlice that a
// real cluster's kube-apiserver maintains. The local kube-apiserver runs
// without an endpoint reconciler because its loopback address cannot be
// stored, so callers pass documentation addresses (192.0.2.0/24) that
// stand in for the control-plane nodes in rendered bundles.
func PublishAPIEndpoints(ctx context.Context, kube kubernetes.Interface, addresses ...string) error {
	return publishEndpoints(ctx, kube, discoveryv1.AddressTypeIPv4, 6443, addresses)
}

// PublishLocalAPIServer publishes the local kube-apiserver itself as the
// cluster's API endpoint, for simulated hosts that run the real bootstrap
// and bashible against it: an IPv4 EndpointSlice cannot hold its loopback
// address, so the slice holds, with kube-apiserver's port, the name
// controlplane.APIServerDNSName (in its serving certificate), which the
// hosts resolve to 127.0.0.1 (framework.StartSSHHost writes it to their
// /etc/hosts). It returns the endpoint, host:port.
func PublishLocalAPIServer(ctx context.Context, kube kubernetes.Interface, cp *controlplane.ControlPlane) (string, error) {
	u, err := url.Parse(cp.APIServerURL)
	if err != nil {
		return "", fmt.Errorf("kube-apiserver's URL %q: %w", cp.APIServerURL, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return "", fmt.Errorf("kube-apiserver's URL %q has no port: %w", cp.APIServerURL, err)
	}
	if err := publishEndpoints(ctx, kube, discoveryv1.AddressTypeFQDN, int32(port), []string{controlplane.APIServerDNSName}); err != nil {
		return "", err
	}
	return net.JoinHostPort(controlplane.APIServerDNSName, u.Port()), nil
}

func publishEndpoints(ctx context.Context, kube kubernetes.Interface, typ discoveryv1.AddressType, port int32, addresses []string) error {
	endpoints := make([]discoveryv1.Endpoint, 0, len(addresses))
	for _, a := range addresses {
		endpoints = append(endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	_, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "node-manager-stack",
		}},
		AddressType: typ,
		Endpoints:   endpoints,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port)}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("writing the default/kubernetes EndpointSlice: %w", err)
	}
	return nil
}
