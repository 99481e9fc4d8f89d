package templates

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func TestNewContextResolvesDefaults(t *testing.T) {
	settings, err := ParseClusterConfiguration([]byte("podSubnetNodeCIDRPrefix: \"22\"\ndefaultCRI: ContainerdV2\nkubernetesVersion: \"1.35\""))
	if err != nil {
		t.Fatal(err)
	}
	ng := &deckhousev1.NodeGroup{Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	ng.Name = "w"
	ctx, err := NewContext(ng, settings, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if ctx.NodeGroup.Kubelet.MaxPods != 500 || ctx.CRI != "ContainerdV2" || ctx.KubernetesVersion != "1.35" ||
		ctx.Normal.APIServerEndpoints == nil || ctx.NodeGroup.Disruptions.ApprovalMode != "Automatic" {
		t.Errorf("context: %+v", ctx)
	}
	ng.Spec.KubernetesVersion = "1.36"
	ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRINotManaged, NotManaged: &deckhousev1.NotManagedCRISpec{CRISocketPath: "/run/crio/crio.sock"}}
	ng.Spec.Kubelet = &deckhousev1.KubeletSpec{ResourceReservation: &deckhousev1.ResourceReservationSpec{
		Mode: deckhousev1.ResourceReservationStatic, Static: &deckhousev1.StaticResourceReservation{CPU: ptrTo(resource.MustParse("500m"))},
	}}
	if ctx, err = NewContext(ng, settings, nil, ""); err != nil {
		t.Fatal(err)
	}
	if ctx.KubernetesVersion != "1.36" || ctx.CRI != "NotManaged" || ctx.NodeGroup.CRI.NotManaged.CRISocketPath != "/run/crio/crio.sock" ||
		ctx.NodeGroup.Kubelet.ResourceReservation.Static.CPU != "500m" || ctx.NodeGroup.Kubelet.ResourceReservation.Static.Memory != "" {
		t.Errorf("context with overrides: %+v", ctx.NodeGroup)
	}
	values, err := ctx.Values()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := values["nodeGroup"].(map[string]any)["kubelet"]; !ok {
		t.Errorf("values use JSON names: %v", values)
	}
}

func TestMaxPodsFollowsThePodSubnetPrefix(t *testing.T) {
	for prefix, want := range map[int]int32{26: 120, 24: 120, 23: 250, 22: 500, 21: 1000, 16: 1000} {
		if got := maxPodsForPrefix(prefix); got != want {
			t.Errorf("/%d: %d, want %d", prefix, got, want)
		}
	}
}

func TestAPIServerEndpoints(t *testing.T) {
	https, metrics := "https", "metrics"
	port, other := int32(6443), int32(9000)
	notReady := false
	slices1 := []*discoveryv1.EndpointSlice{
		{
			Ports: []discoveryv1.EndpointPort{{Name: &https, Port: &port}, {Name: &metrics, Port: &other}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.0.0.2"}},
				{Addresses: []string{"10.0.0.1"}},
				{Addresses: []string{"10.0.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}},
			},
		},
		{Ports: []discoveryv1.EndpointPort{{Name: &https, Port: &port}}, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1", "fd00::1"}}}},
	}
	want := []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.9:6443", "[fd00::1]:6443"}
	if got := APIServerEndpoints(slices1); !slices.Equal(got, want) {
		t.Errorf("endpoints = %v, want %v", got, want)
	}
}

// An API server that turns not ready and ready again must not change any
// group's configuration: that would roll the fleet through update approval.
func TestAnEndpointReadinessFlapChangesNoGroupsChecksum(t *testing.T) {
	https, port := "https", int32(6443)
	endpointsWith := func(ready bool) []string {
		return APIServerEndpoints([]*discoveryv1.EndpointSlice{{
			Ports: []discoveryv1.EndpointPort{{Name: &https, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.0.0.1"}},
				{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			},
		}})
	}
	tree := builtinTree(t)
	settings, err := ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ng := range []*deckhousev1.NodeGroup{
		{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}},
		{ObjectMeta: metav1.ObjectMeta{Name: "master"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudPermanent}},
	} {
		sums := map[bool]string{}
		for _, ready := range []bool{true, false} {
			ctx, err := NewContext(ng, settings, endpointsWith(ready), testCA)
			if err != nil {
				t.Fatal(err)
			}
			sums[ready] = mustRender(t, tree, ctx).Checksum
		}
		if sums[true] != sums[false] {
			t.Errorf("group %s: checksum %.12s with the second API server ready, %.12s with it not ready", ng.Name, sums[true], sums[false])
		}
	}
}

// TestDeckhouseDockerGroupGetsTheClusterRuntime: a group Deckhouse stored
// with its deprecated cri.type Docker (and cri.docker) renders, with the
// cluster's runtime, exactly as the same group without them: Docker is
// inert here.
func TestDeckhouseDockerGroupGetsTheClusterRuntime(t *testing.T) {
	tree := builtinTree(t)
	plain := mustRender(t, tree, workerContext(t, nil))
	ctx, err := newWorkerContext(func(ng *deckhousev1.NodeGroup) {
		ng.Spec.CRI = &deckhousev1.CRISpec{Type: deckhousev1.CRIDocker,
			Docker: &deckhousev1.DockerSpec{MaxConcurrentDownloads: ptrTo[int32](10), Manage: ptrTo(true)}}
	})
	if err != nil {
		t.Fatalf("a group with cri.type Docker: %v", err)
	}
	if ctx.CRI != DefaultCRI || ctx.NodeGroup.CRI.Type != DefaultCRI {
		t.Errorf("cri.type Docker resolved to %q (nodeGroup.cri.type %q), want the cluster's %q", ctx.CRI, ctx.NodeGroup.CRI.Type, DefaultCRI)
	}
	if docker := mustRender(t, tree, ctx); docker.Checksum != plain.Checksum {
		t.Errorf("cri.type Docker changed the bundle (checksum %s, without it %s)", docker.Checksum, plain.Checksum)
	}
}
