package fencingagent

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// nodeNameExtra is the extra kube-apiserver adds to the identity of a
// ServiceAccount token bound to a Pod on a node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// asToken is a client that authenticates with token.
func asToken(token string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: f.CP.APIServerURL, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.CP.CACertPEM()}})
}

func patchLabels(ctx context.Context, c kubernetes.Interface, node string, labels map[string]any, annotations map[string]any) error {
	meta := map[string]any{}
	if labels != nil {
		meta["labels"] = labels
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: deckhousev1.FencingAgentName})
	return err
}

// refused checks that err is a 403 whose message contains want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v, want a refusal saying %q", what, err, want)
	}
}

// The agent's token (bound to its Pod on its node) carries the node, and
// the admission policy lets it change only its own Node's two fencing
// labels; RBAC alone would let it patch any Node.
func TestTheAgentMayChangeOnlyItsOwnNodesFencingLabels(t *testing.T) {
	ctx := framework.Context(t)
	own, other := "fa-policy-own", "fa-policy-other"
	f.TestNode(t, framework.NewNode(own, "fa-policy"))
	f.TestNode(t, framework.NewNode(other, "fa-policy"))
	token, pod, err := stack.FencingAgentToken(ctx, f.Kube, own)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Pods(deckhousev1.Namespace).Delete(context.Background(), pod, metav1.DeleteOptions{})
	})
	agent := asToken(token)

	// The harness's kube-apiserver puts the node in a pod-bound token, as
	// a real cluster does for the DaemonSet's projected token.
	review, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Extra[nodeNameExtra]; !slices.Equal(got, authenticationv1.ExtraValue{own}) {
		t.Fatalf("the agent's identity %+v: extra %s = %v, want [%s]", review.Status.UserInfo, nodeNameExtra, got, own)
	}

	fencing := map[string]any{deckhousev1.FencingEnabledLabel: "", deckhousev1.FencingModeLabel: deckhousev1.FencingModeWatchdog}
	if err := patchLabels(ctx, agent, own, fencing, nil); err != nil {
		t.Fatalf("the agent may label its own Node: %v", err)
	}
	if err := patchLabels(ctx, agent, own, map[string]any{deckhousev1.FencingEnabledLabel: nil}, nil); err != nil {
		t.Fatalf("the agent may remove its own Node's label: %v", err)
	}

	// kube-apiserver enforces a policy about a second after it is created:
	// wait for the first refusal.
	framework.Poll(t, "the admission policy refusing "+own+"'s agent a write to "+other, func(ctx context.Context) (bool, error) {
		return apierrors.IsForbidden(patchLabels(ctx, agent, other, fencing, nil)), nil
	})
	refused(t, "another node's fencing label", patchLabels(ctx, agent, other, fencing, nil),
		"fencing-agent on node "+own+" may change only its own Node, not Node "+other)
	refused(t, "another label of its own Node", patchLabels(ctx, agent, own, map[string]any{deckhousev1.NodeGroupLabel: "elsewhere"}, nil),
		"fencing-agent may change only the labels")
	refused(t, "an annotation of its own Node", patchLabels(ctx, agent, own, nil, map[string]any{deckhousev1.FencingDisableAnnotation: ""}),
		"its spec, other annotations, finalizers and owners must stay as they are")
	refused(t, "a keyring fingerprint that is no fingerprint", patchLabels(ctx, agent, own, nil, map[string]any{deckhousev1.FencingGossipKeyringAnnotation: "a key, perhaps"}),
		"gossip keyring fingerprint (16 hex digits)")
	if err := patchLabels(ctx, agent, own, nil, map[string]any{deckhousev1.FencingGossipKeyringAnnotation: "0123456789abcdef"}); err != nil {
		t.Errorf("the agent reporting its keyring fingerprint: %v", err)
	}
	refused(t, "a fencing mode that does not exist", patchLabels(ctx, agent, own, map[string]any{deckhousev1.FencingModeLabel: "Reboot"}, nil),
		"fencing-mode only to Watchdog or Notify")

	// A token of the same ServiceAccount not bound to a pod carries no
	// node, and changes no Node.
	unbound, err := f.Kube.CoreV1().ServiceAccounts(deckhousev1.Namespace).CreateToken(ctx, deckhousev1.FencingAgentName,
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "an unbound token", patchLabels(ctx, asToken(unbound.Status.Token), own, fencing, nil),
		"carries no node")
}
