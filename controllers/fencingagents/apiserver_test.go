package fencingagents

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/node-manager/node-manager/agents/fencing-agent/agent"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// The agents reach the API as the kubelet does, through the node's local
// API proxy, not through the Service VIP of their in-cluster
// configuration: the DaemonSet's command line, parsed by the agent's own
// options, must give a client of the proxy that keeps the in-cluster
// credentials. Before, the agent used the Service VIP, so a node whose
// kube-proxy or CNI broke was reset though its kubelet reached the API.
func TestTheAgentsReachTheAPIThroughTheNodesLocalProxy(t *testing.T) {
	for _, mode := range []string{deckhousev1.FencingModeWatchdog, deckhousev1.FencingModeNotify} {
		t.Run(mode, func(t *testing.T) {
			pod := DaemonSet(fenced("workers", mode), deckhousev1.Namespace, "registry/fencing-agent:v1").Spec.Template.Spec
			if !pod.HostNetwork {
				t.Fatal("the agents are not on the host network: 127.0.0.1 would be the pod's own")
			}
			// The in-cluster configuration as a kubeconfig: the Service VIP
			// and the pod's token.
			dir := t.TempDir()
			kubeconfig, ca, token := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
			for _, f := range []string{ca, token} {
				if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := clientcmd.WriteToFile(clientcmdapi.Config{
				Clusters:       map[string]*clientcmdapi.Cluster{"in-cluster": {Server: "https://10.222.0.1:443", CertificateAuthority: ca}},
				AuthInfos:      map[string]*clientcmdapi.AuthInfo{"pod": {TokenFile: token}},
				Contexts:       map[string]*clientcmdapi.Context{"in-cluster": {Cluster: "in-cluster", AuthInfo: "pod"}},
				CurrentContext: "in-cluster",
			}, kubeconfig); err != nil {
				t.Fatal(err)
			}
			opts := agent.NewOptions()
			fs := pflag.NewFlagSet(deckhousev1.FencingAgentName, pflag.ContinueOnError)
			opts.AddFlags(fs)
			args := make([]string, 0, len(pod.Containers[0].Args)+1)
			for _, a := range pod.Containers[0].Args {
				args = append(args, strings.ReplaceAll(a, "$(HOST_IP)", "10.0.0.5"))
			}
			if err := fs.Parse(append(args, "--kubeconfig="+kubeconfig)); err != nil {
				t.Fatalf("the agent refuses its DaemonSet's command line %v: %v", args, err)
			}
			cfg, err := opts.RESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != deckhousev1.NodeAPIProxyURL {
				t.Errorf("the agent reaches the API at %s, want the node's local API proxy %s (the kubelet's path)", cfg.Host, deckhousev1.NodeAPIProxyURL)
			}
			if cfg.BearerTokenFile == "" || cfg.CAFile == "" {
				t.Errorf("the in-cluster token and CA are lost: token file %q, CA file %q", cfg.BearerTokenFile, cfg.CAFile)
			}
		})
	}
}
