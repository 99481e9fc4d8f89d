// Package bashible is the e2e suite of bashible-apiserver: the real server
// binary, registered with the real kube-apiserver aggregator, exercised with
// kubectl and client-go as administrators, nodes and bootstrap tokens.
package bashible

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	cp       *controlplane.ControlPlane
	replica  *stack.Bashible
	kube     kubernetes.Interface
	nm       versioned.Interface
	repoRoot string
)

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		if cp != nil {
			fmt.Fprintf(os.Stderr, "logs:\n%s", cp.LogTails(40))
		}
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err := stack.NewEnvironment(ctx)
	if err != nil {
		return fail("set up: %v", err)
	}
	cp, repoRoot = env.CP, env.Root
	defer cp.StopOnSignal()()
	defer func() { _ = cp.Stop() }()
	cfg := cp.AdminConfig()
	kube = kubernetes.NewForConfigOrDie(cfg)
	nm = versioned.NewForConfigOrDie(cfg)
	if err := seedCluster(ctx); err != nil {
		return fail("seed cluster: %v", err)
	}
	if replica, err = env.StartRegistered(ctx, stack.BashibleOptions{Identity: "replica-1"}); err != nil {
		return fail("start bashible-apiserver: %v", err)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs:\n%s", cp.LogTails(60))
	}
	return code
}

// seedCluster writes what a real cluster would have: API endpoints (the
// local kube-apiserver's loopback address cannot be stored, so a
// documentation address stands in), a cluster configuration, and two groups.
func seedCluster(ctx context.Context) error {
	https := "https"
	_, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "e2e",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}}, {Addresses: []string{"192.0.2.11"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &https, Port: ptr.To[int32](6443)}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	for _, ng := range []string{"master", "worker"} {
		if err := createGroup(ctx, ng, nil); err != nil {
			return err
		}
	}
	return nil
}
