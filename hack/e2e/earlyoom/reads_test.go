package earlyoom

import (
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestTheAgentReadsOnlyItsOwnNodesPods: RBAC grants early-oom list and
// watch on pods cluster-wide (it cannot narrow by field selector); the
// control plane's authorization chain (manifests/control-plane, which the
// harness's kube-apiserver runs unchanged) denies any list or watch of pods
// by early-oom that does not select spec.nodeName=<the node its token is
// bound to> (issue 35, item 18). The agent's own list is allowed; a list of
// every pod, of another node's pods, a watch of every pod, a get of another
// node's pod by name, and any list with a token bound to no pod are denied.
func TestTheAgentReadsOnlyItsOwnNodesPods(t *testing.T) {
	a := newNode(t, "oom-reads", "workers")
	b := newNode(t, "oom-reads-other", "workers")
	pod, token := agentIdentity(t, a)
	foreign := newPod(t, metav1.NamespaceDefault, "reads-foreign", b.name, podSpec{})
	own := newPod(t, metav1.NamespaceDefault, "reads-own", a.name, podSpec{})
	as := func(token string) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(&rest.Config{Host: f.CP.APIServerURL, BearerToken: token,
			TLSClientConfig: rest.TLSClientConfig{CAData: f.CP.CACertPEM()}})
	}
	agent := as(token)
	ctx := framework.Context(t)
	onNode := func(n string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n).String()}
	}

	list, err := agent.CoreV1().Pods("").List(ctx, onNode(a.name))
	if err != nil {
		t.Fatalf("the agent listing its own node's pods (its one list): %v", err)
	}
	names := map[string]bool{}
	for _, p := range list.Items {
		names[p.Name] = true
	}
	if !names[own.Name] || !names[pod.Name] || names[foreign.Name] {
		t.Errorf("the agent's own list holds %v; want %s and %s, not %s", names, own.Name, pod.Name, foreign.Name)
	}
	if w, err := agent.CoreV1().Pods("").Watch(ctx, onNode(a.name)); err != nil {
		t.Errorf("the agent watching its own node's pods: %v", err)
	} else {
		w.Stop()
	}

	// The chain's webhook never answers, so kube-apiserver reports its
	// Deny as an authorization error (500, "connection refused" to the
	// webhook) rather than a 403; RBAC's own refusals are 403s. Either way
	// nothing is served.
	denied := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) && !(apierrors.IsInternalError(err) && strings.Contains(err.Error(), "127.0.0.1:1")) {
			t.Errorf("%s as early-oom: %v; want it refused", what, err)
		}
	}
	_, err = agent.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	denied("listing every pod of the cluster", err)
	_, err = agent.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	denied("listing every pod of a namespace", err)
	_, err = agent.CoreV1().Pods("").List(ctx, onNode(b.name))
	denied("listing another node's pods", err)
	_, err = agent.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	denied("watching every pod", err)
	_, err = agent.CoreV1().Pods(foreign.Namespace).Get(ctx, foreign.Name, metav1.GetOptions{})
	denied("getting another node's pod by name", err)

	unbound, err := f.Kube.CoreV1().ServiceAccounts(deckhousev1.Namespace).CreateToken(ctx, deckhousev1.EarlyOOMName,
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = as(unbound.Status.Token).CoreV1().Pods("").List(ctx, onNode(a.name))
	denied("listing a node's pods with a token bound to no pod", err)
}
